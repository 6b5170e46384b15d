// Package service serves the agent's wire: the Connect handlers of
// process.Process, filesystem.Filesystem and sbxagent.Agent, and envd's HTTP
// routes (/health, /files), over one process table and one file tree.
package service

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"sbx.dev/sbx/api/agent/filesystem/filesystemconnect"
	"sbx.dev/sbx/api/agent/process/processconnect"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
	"sbx.dev/sbx/internal/agent/files"
	"sbx.dev/sbx/internal/agent/process"
	"sbx.dev/sbx/internal/protocodec"
)

// maxRequestBytes bounds a Connect request (WriteFile content included).
const maxRequestBytes = 64 << 20

// Config is what the services need besides the table and the tree.
type Config struct {
	Version string
	// Env is the base environment of every process.
	Env []string
	Log *slog.Logger
	// Archive caps extractions; zero fields mean files' defaults.
	Archive files.ArchiveLimits
	// WarmUp is the agent's own warm-up (mapping its code), run by
	// WarmAgent before the service's; nil for none. It must be safe to call
	// twice.
	WarmUp func()
}

// Server implements the three services and the HTTP routes.
type Server struct {
	cfg     Config
	fs      *files.FS
	table   *process.Table
	log     *slog.Logger
	started time.Time
	watches watchers
	// warmAgent builds the agent service's handler (Handler sets it).
	warmAgent func()
	warmSpawn sync.Once
}

// New returns a server over table and fs.
func New(cfg Config, table *process.Table, fs *files.FS) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Archive = cfg.Archive.WithDefaults()
	return &Server{cfg: cfg, fs: fs, table: table, log: cfg.Log, started: time.Now(), watches: watchers{m: map[string]*watcher{}}}
}

// Handler returns the routes: the three Connect services, GET /health and
// GET/POST /files.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// Compression buys nothing over a local socket and costs CPU on every call.
	// protocodec: no reflection in a fresh agent's first exec.
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxRequestBytes), connect.WithCompressMinBytes(math.MaxInt32), connect.WithCodec(protocodec.Codec{})}
	mux.Handle(servicePath(processconnect.ProcessName), holding(onFirstUse(func() (string, http.Handler) {
		return processconnect.NewProcessHandler(envdProcess{s}, opts...)
	})))
	mux.Handle(servicePath(filesystemconnect.FilesystemName), onFirstUse(func() (string, http.Handler) {
		return filesystemconnect.NewFilesystemHandler(envdFS{s}, opts...)
	}))
	for _, r := range agentRoutes(agentService{s}, opts...) {
		h, build := onFirstUseWarm(r.build)
		if r.procedure == sbxagentconnect.AgentExecProcedure {
			s.warmAgent = build
		}
		if r.procedure == sbxagentconnect.AgentExecProcedure || r.procedure == sbxagentconnect.AgentAttachProcedure {
			h = holding(h)
		}
		mux.Handle(r.procedure, h)
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", s.download)
	mux.HandleFunc("POST /files", s.upload)
	mux.HandleFunc("GET /files/archive", s.downloadArchive)
	mux.HandleFunc("POST /files/archive", s.extractArchive)
	return mux
}

// servicePath is the route of a Connect service: "/<package>.<Service>/".
func servicePath(service string) string { return "/" + service + "/" }

// onFirstUse builds a service's handler on its first request. Building one
// resolves its protobuf descriptors and makes a handler per method: a few
// milliseconds of every sandbox's start, mostly page faults, which a sandbox
// that never calls the service (the envd services, for most) does not pay.
func onFirstUse(build func() (string, http.Handler)) http.Handler {
	h, _ := onFirstUseWarm(func() http.Handler {
		_, h := build()
		return h
	})
	return h
}

// onFirstUseWarm is onFirstUse that also returns a function building the
// handler ahead of its first request.
func onFirstUseWarm(build func() http.Handler) (http.Handler, func()) {
	h := sync.OnceValue(build)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h().ServeHTTP(w, r) }), func() { h() }
}

// WarmAgent runs the agent's own warm-up (Config.WarmUp) and builds the
// handler of the sbx agent service's Exec, which every exec the daemon sends
// goes through, before its first request: a warm sandbox's first exec then
// does not pay them. Call it after Handler.
func (s *Server) WarmAgent() {
	if s.cfg.WarmUp != nil {
		s.cfg.WarmUp()
	}
	if s.warmAgent != nil {
		s.warmAgent()
	}
}

// Warm finishes the warm-up: WarmAgent's, and one first process
// (warmSpawnProcess), once; a call while another runs waits for it. A
// Health call asking for warm runs it.
func (s *Server) Warm() {
	s.WarmAgent()
	s.warmSpawn.Do(s.warmSpawnProcess)
}

// warmSpawnTimeout bounds the warm-up's process.
const warmSpawnTimeout = 5 * time.Second

// warmUpArgv is the warm-up's process: the sandbox's shell running the null
// command, its $0 saying what it is to anyone who sees it in the sandbox.
var warmUpArgv = []string{"/bin/sh", "-c", ":", "sbx-warm-up"}

// warmSpawnProcess runs one process no caller sees (warmUpArgv) in the
// workdir, and waits for it: what any first process in a new sandbox pays
// (the first of the table's cgroups, the spawn path's first use, the
// dynamic loader's and libc's lookups through a new root's overlay) is then
// not paid by the caller's first exec, ~0.9 ms of it measured on a two-core
// VM. A root without /bin/sh changes nothing.
func (s *Server) warmSpawnProcess() {
	p, err := s.start(process.Spec{Argv: warmUpArgv, Timeout: warmSpawnTimeout, Unlisted: true})
	if err != nil {
		s.log.Debug("warm-up process", "err", err)
		return
	}
	<-p.Done()
}

// Close ends the watches.
func (s *Server) Close() { s.watches.closeAll() }

// start starts spec, a command from either process service: its Cwd is
// the one asked for (empty: the workdir) and its Envs the request's own
// variables; start resolves the directory and adds the base environment.
func (s *Server) start(spec process.Spec) (*process.Proc, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errInvalid("no command: argv is empty")
	}
	cwd, err := s.fs.Clean(spec.Cwd)
	if err != nil {
		return nil, err
	}
	dir, done, err := s.fs.HostDir(cwd)
	if err != nil {
		if k := files.KindOf(err); k == files.NotFound || k == files.Invalid {
			return nil, errInvalid("cwd '%s' does not exist", cwd)
		}
		return nil, err
	}
	defer done()
	spec.Dir, spec.Cwd, spec.Env = dir, cwd, mergeEnv(s.cfg.Env, spec.Envs)
	return s.table.Start(spec)
}

// mergeEnv returns base with extra's variables set (extra wins).
func mergeEnv(base []string, extra map[string]string) []string {
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := extra[k]; !over {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		out = append(out, k+"="+extra[k])
	}
	return out
}

// keepaliveInterval reads envd's Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h http.Header, def time.Duration) time.Duration {
	if v, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return def
}

// follow delivers p's events until its result, through send, with keepalives
// after interval of silence. It returns false if ctx ended first. A process
// started with the call's deadline as its lifetime is killed at that deadline,
// so follow goes on a little past it for the result, and as long as output
// still comes (the process's end is being read at the caller's pace).
func follow(ctx context.Context, p *process.Proc, sub *process.Sub, interval time.Duration,
	send func(process.Event) error, keepalive func() error) (bool, error) {
	if sub != nil {
		defer p.Unsubscribe(sub)
	}
	var ready <-chan struct{}
	if sub != nil {
		ready = sub.Ready()
	}
	ka := time.NewTimer(interval)
	defer ka.Stop()
	drain := func() error {
		if sub == nil {
			return nil
		}
		for _, ev := range sub.Drain() {
			err := send(ev) // done with ev.Data when it returns
			ev.Release()
			if err != nil {
				return err
			}
		}
		return nil
	}
	ctxDone := ctx.Done()
	var grace *time.Timer
	var graceC <-chan time.Time
	for {
		select {
		case <-ready:
			if err := drain(); err != nil {
				return false, err
			}
			ka.Reset(interval)
			if grace != nil {
				grace.Reset(followGrace)
			}
		case <-p.Done():
			return true, drain()
		case <-ka.C:
			if err := keepalive(); err != nil {
				return false, err
			}
			ka.Reset(interval)
		case <-ctxDone:
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return false, nil
			}
			ctxDone = nil // the process's own timeout fires now: wait for its end
			grace = time.NewTimer(followGrace)
			defer grace.Stop()
			graceC = grace.C
		case <-graceC:
			return false, nil
		}
	}
}

// followGrace is how long follow waits past its call's deadline for the
// process's end, counted from the last output it delivered.
const followGrace = 2 * time.Second
