// Package backend is the seam between the manager and the ways sbx can isolate a
// sandbox. A driver starts the in-sandbox agent somewhere isolated and hands back a
// way to dial it; every tool is then served by the agent, whatever the driver.
// Package backend knows nothing of the manager, store or servers.
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// Driver runs sandboxes of one isolation kind. To the manager a sandbox is an
// agent it can dial; how the agent is confined is the driver's affair.
// Methods are safe for concurrent use on different sandboxes.
type Driver interface {
	// Probe says whether this host can run the driver, how strongly it isolates,
	// and why not. It fails only when probing itself breaks.
	Probe(ctx context.Context) (Report, error)
	// Start builds the sandbox and starts its agent. On error nothing is left
	// behind. If a layer in spec.RequireLayers cannot be applied, it fails with
	// an error wrapping sandbox.ErrIsolation that names the layer and the reason.
	Start(ctx context.Context, spec sandbox.Spec) (*Instance, error)
	// Stop ends every process of the sandbox (the whole tree), SIGTERM first and
	// SIGKILL after grace. The sandbox's files stay until Destroy.
	Stop(ctx context.Context, id sandbox.ID, grace time.Duration) error
	// Wait blocks until the sandbox's agent has exited, or ctx ends.
	Wait(ctx context.Context, id sandbox.ID) (sandbox.Exit, error)
	// Destroy frees every host resource of the sandbox, killing what still runs.
	// It is idempotent, safe after a failed Start, and runs every step even when
	// one fails, returning them all joined.
	Destroy(ctx context.Context, id sandbox.ID) error
	// Recover reattaches to a sandbox started before the daemon restarted, from
	// Instance.Saved. It fails with sandbox.ErrNotFound when the sandbox is gone
	// (its resources may remain: call Destroy).
	Recover(ctx context.Context, id sandbox.ID, saved []byte) (*Instance, error)
}

// Instance is a started sandbox as its driver hands it to the manager.
type Instance struct {
	ID sandbox.ID
	// Dial reaches the agent. Each call opens a new connection.
	Dial func(ctx context.Context) (net.Conn, error)
	// Applied is what is enforced, not what was asked.
	Applied sandbox.Isolation
	// Saved is driver-private; the manager stores it and passes it to Recover.
	Saved []byte
	// Serving: Start saw the agent serve (its ready report, or an answer),
	// so the manager need not ask it before handing the sandbox out.
	Serving bool
}

// Resizer is implemented by drivers that can change a running sandbox's limits
// (memory, pids, CPU) in place. The manager's warm pool needs it to hand out a
// sandbox started ahead of demand with the limits a request asks for.
type Resizer interface {
	Resize(ctx context.Context, id sandbox.ID, spec sandbox.Spec) error
}

// Network is the daemon's egress path (package network): it connects a
// sandbox's network namespace to the proxy and resolver, and nothing else.
type Network interface {
	// Attach connects the sandbox whose network namespace is ns and returns
	// its address; for a sandbox already attached (before a restart, say) it
	// re-adopts the connection.
	Attach(ctx context.Context, id sandbox.ID, ns *os.File) (netip.Addr, error)
	// Detach undoes Attach; a sandbox not attached is not an error.
	Detach(ctx context.Context, id sandbox.ID) error
	// Gateway is the sandboxes' resolver and explicit proxy address.
	Gateway() netip.Addr
	// CACertPEM is the certificate of the egress proxy's CA, which the
	// sandboxes must trust (proxy-mode secrets).
	CACertPEM() []byte
}

// NetworkSetter is implemented by drivers that can change a running
// sandbox's network tier: connect it when it leaves none, disconnect it when
// it returns there.
type NetworkSetter interface {
	SetNetwork(ctx context.Context, id sandbox.ID, tier sandbox.Network) error
}

// PortDialer is implemented by drivers that can reach a TCP port inside a
// running sandbox from the daemon's side, as preview URLs do. It is ingress:
// the daemon reaching in, so it works under every network tier, none included.
type PortDialer interface {
	// DialPort opens a TCP connection to 127.0.0.1:port in sandbox id's
	// network, bounded by ctx; the connection outlives ctx. Nothing listening
	// fails with an error wrapping syscall.ECONNREFUSED; a sandbox the driver
	// does not hold running, with sandbox.ErrNotFound. Safe for concurrent use.
	DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error)
}

// CheckPort refuses a port outside 1-65535 for DialPort, naming it.
func CheckPort(op string, id sandbox.ID, port int) error {
	if port < 1 || port > 65535 {
		return &sandbox.Error{Op: op, ID: id, Err: sandbox.Invalid("port", "%d is outside [1, 65535]", port)}
	}
	return nil
}

// Stats is the resource use of one sandbox.
type Stats struct {
	MemoryBytes     int64
	MemoryPeakBytes int64
	Pids            int64
	CPUUsage        time.Duration
	OOMKills        int64
	// DiskBytes is what the sandbox's writable files take on the host's
	// disk; 0 where the driver cannot tell.
	DiskBytes int64
}

// Statser is implemented by drivers that can read a sandbox's resource use.
type Statser interface {
	Stats(ctx context.Context, id sandbox.ID) (Stats, error)
}

// Lister is implemented by drivers that can enumerate the sandboxes they hold
// host resources for, so the daemon can reap what its store does not know.
type Lister interface {
	ListHeld(ctx context.Context) ([]sandbox.ID, error)
}

// Closer is implemented by drivers with host state of their own to tidy when
// the daemon stops. Close must leave every sandbox running.
type Closer interface {
	Close(ctx context.Context) error
}

// Report is the result of a Probe.
type Report struct {
	Backend   string
	Available bool
	// Level is the isolation tier a sandbox gets here ("native", "none", ...).
	Level string
	// Sandbox is false for backends that do not isolate (local).
	Sandbox bool
	// Layers is what this host can apply; LayerReasons says why not, for
	// each missing one.
	Layers       map[string]sandbox.LayerState
	LayerReasons map[string]string
	Checks       []Check
	// Templates are the templates a sandbox may be made from here, the
	// default first; nil when the backend takes any name (a remote's).
	Templates []string
}

// Check is one requirement a probe tested.
type Check struct {
	Name string
	OK   bool
	// Reason is why not, in words an operator can act on.
	Reason string
}

// Reasons returns the reasons of the failed checks.
func (r Report) Reasons() []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Name+": "+c.Reason)
		}
	}
	return out
}

// Options are what every driver is opened with.
type Options struct {
	// DataDir is the driver's own directory under the daemon's data dir.
	DataDir string
	// Instance is the daemon instance's short name: every host resource the
	// driver creates carries it, so two daemons never touch each other's.
	Instance string
	// Exe is the path of the sbx binary to start the hidden stages from.
	Exe string
	Log *slog.Logger
	// OutputLimitBytes and SpillLimitBytes are passed to the agent.
	OutputLimitBytes int64
	SpillLimitBytes  int64
	// ArchiveMaxBytes and ArchiveMaxEntries cap an archive extraction; they
	// are passed to the agent (0: its defaults).
	ArchiveMaxBytes   int64
	ArchiveMaxEntries int64
	// UIDRange is the host uid/gid range whose 65536-id slots the sandboxes'
	// user namespaces map to: "START-END" (inclusive), or "auto" or "" for a
	// free block chosen host-wide and kept across restarts (native).
	UIDRange string
	// Network is the egress path of the allowlist and full tiers; nil when
	// the daemon runs without one (only none is then offered).
	Network Network
	// E2B is the remote server the e2b driver runs sandboxes on; the other
	// drivers ignore it.
	E2B E2BRemote
	// Templates are the operator's directory templates: name → absolute
	// path of a directory holding a whole Linux root, whose content is
	// untrusted (native; the other drivers know only host).
	Templates map[string]string
	// GitRepos are the host git repositories (absolute paths) a local
	// sandbox may read, to clone a staging copy from (the local driver's git
	// staging jail); the other drivers ignore it.
	GitRepos []string
}

// E2BRemote is an E2B-compatible server (real E2B, or another sbx): its
// control plane, its data plane (envd), the key and the template.
type E2BRemote struct {
	// URL is the control plane's base, e.g. https://api.e2b.app.
	URL string
	// SandboxURL is the base of every sandbox's envd, reached with E2B's
	// routing headers; empty derives it as E2B's SDK does (the domain the
	// create answers, else URL).
	SandboxURL string
	// APIKey is sent as X-API-Key; it is never logged.
	APIKey string
	// Template is the template sbx's default template (host) runs as.
	Template string
}

// ErrRefused marks an Opener's error that is the operator's configuration at
// fault (a uid range overlapping another instance's, say): the daemon refuses
// to start with it rather than run without the driver.
var ErrRefused = errors.New("configuration refused")

// Opener opens a driver.
type Opener func(ctx context.Context, opts Options) (Driver, error)

var (
	mu       sync.Mutex
	registry = map[string]Opener{} // guarded by mu
)

// Register makes a driver available by name. It panics on a duplicate name;
// backend/builtin calls it for every driver compiled in.
func Register(name string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("backend: driver %q registered twice", name))
	}
	registry[name] = open
}

// Lookup returns the opener of the named driver.
func Lookup(name string) (Opener, bool) {
	mu.Lock()
	defer mu.Unlock()
	o, ok := registry[name]
	return o, ok
}

// Names lists the registered drivers, sorted.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// WaitExit is the body of Driver.Wait for drivers that learn of their sandbox's
// end through a channel: it blocks until done is closed, then returns *exit
// (written before done closed), or fails when ctx ends. A nil done (a sandbox
// the driver does not hold) is ErrNotFound.
func WaitExit(ctx context.Context, id sandbox.ID, done <-chan struct{}, exit *sandbox.Exit) (sandbox.Exit, error) {
	if done == nil {
		return sandbox.Exit{}, &sandbox.Error{Op: "wait", ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	select {
	case <-done:
		return *exit, nil
	case <-ctx.Done():
		return sandbox.Exit{}, sandbox.Wrap("wait", id, context.Cause(ctx))
	}
}
