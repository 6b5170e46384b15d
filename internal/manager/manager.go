// Package manager owns the life of sandboxes: admission through a bounded queue,
// create, exec and file calls through the agent, TTL expiry, destroy, and recovery
// of what the store knows at start. It sees drivers only through package backend.
package manager

import (
	"context"
	"io"
	"log/slog"
	"time"

	"sbx/internal/backend"
	"sbx/internal/sandbox"
	"sbx/internal/store"
)

// NamedDriver is one entry of the SANDBOX_BACKEND fallback list.
type NamedDriver struct {
	Name   string
	Driver backend.Driver
}

// Options configure a Manager.
type Options struct {
	Store *store.Store
	// Drivers in fallback order: the first available one creates sandboxes.
	Drivers []NamedDriver
	Policy  sandbox.Policy
	Log     *slog.Logger
	// MaxConcurrentCreates bounds creates in flight; others wait in the queue.
	MaxConcurrentCreates int
	// QueueTimeout bounds the wait in the queue before ErrUnavailable (503).
	QueueTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Manager is safe for concurrent use.
type Manager struct{}

// New returns a manager; call Recover before serving.
func New(ctx context.Context, opts Options) (*Manager, error) { panic("unimplemented") }

// Recover re-adopts the sandboxes the store lists (and whose drivers can reattach)
// and cleans up the rest, then starts the TTL reaper.
func (m *Manager) Recover(ctx context.Context) error { panic("unimplemented") }

// Close stops admitting work, waits for in-flight creates within ctx, and stops the
// reaper. Sandboxes keep running.
func (m *Manager) Close(ctx context.Context) error { panic("unimplemented") }

// Create admits req through the policy and the queue, starts it on the first
// available driver, and returns the running sandbox.
func (m *Manager) Create(ctx context.Context, req sandbox.CreateRequest) (sandbox.Sandbox, error) {
	panic("unimplemented")
}

func (m *Manager) Get(ctx context.Context, id sandbox.ID) (sandbox.Sandbox, error) {
	panic("unimplemented")
}

// List returns the sandboxes whose labels include every pair in labels.
func (m *Manager) List(ctx context.Context, labels map[string]string) ([]sandbox.Sandbox, error) {
	panic("unimplemented")
}

// Update changes what may change on a live sandbox.
type Update struct {
	// Timeout, when set, makes the sandbox expire this long from now.
	Timeout *time.Duration
	// Labels, when set, replace the labels.
	Labels map[string]string
}

func (m *Manager) Update(ctx context.Context, id sandbox.ID, u Update) (sandbox.Sandbox, error) {
	panic("unimplemented")
}

// Delete destroys the sandbox. A second call returns ErrNotFound.
func (m *Manager) Delete(ctx context.Context, id sandbox.ID) error { panic("unimplemented") }

// Exec admits req through the policy and runs it; see agentclient.Client.Exec.
func (m *Manager) Exec(ctx context.Context, id sandbox.ID, req sandbox.ExecRequest, stream bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	panic("unimplemented")
}

func (m *Manager) Processes(ctx context.Context, id sandbox.ID) ([]sandbox.ProcessInfo, error) {
	panic("unimplemented")
}

func (m *Manager) Process(ctx context.Context, id sandbox.ID, pid string) (sandbox.ProcessInfo, error) {
	panic("unimplemented")
}

func (m *Manager) Attach(ctx context.Context, id sandbox.ID, pid string, replay bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	panic("unimplemented")
}

func (m *Manager) WaitProcess(ctx context.Context, id sandbox.ID, pid string, timeout time.Duration) (sandbox.ProcessInfo, error) {
	panic("unimplemented")
}

func (m *Manager) WriteStdin(ctx context.Context, id sandbox.ID, pid string, data []byte, eof bool) error {
	panic("unimplemented")
}

func (m *Manager) Signal(ctx context.Context, id sandbox.ID, pid string, sig int) (string, error) {
	panic("unimplemented")
}

func (m *Manager) ReadFile(ctx context.Context, id sandbox.ID, path string, offset, limit int64) (sandbox.ReadResult, error) {
	panic("unimplemented")
}

func (m *Manager) WriteFile(ctx context.Context, id sandbox.ID, path string, content []byte, mode uint32, appendTo bool) (sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (m *Manager) Stat(ctx context.Context, id sandbox.ID, path string) (sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (m *Manager) ListDir(ctx context.Context, id sandbox.ID, path string, depth int) ([]sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (m *Manager) MakeDir(ctx context.Context, id sandbox.ID, path string) (sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (m *Manager) Move(ctx context.Context, id sandbox.ID, src, dst string) (sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (m *Manager) Remove(ctx context.Context, id sandbox.ID, path string) error {
	panic("unimplemented")
}

func (m *Manager) Glob(ctx context.Context, id sandbox.ID, pattern, dir string, limit int) ([]string, bool, error) {
	panic("unimplemented")
}

// GrepRequest selects lines to find.
type GrepRequest struct {
	Pattern    string
	Path       string
	Include    string
	IgnoreCase bool
	Fixed      bool
	Limit      int
}

func (m *Manager) Grep(ctx context.Context, id sandbox.ID, req GrepRequest) ([]sandbox.GrepMatch, bool, error) {
	panic("unimplemented")
}

func (m *Manager) Download(ctx context.Context, id sandbox.ID, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (m *Manager) Upload(ctx context.Context, id sandbox.ID, path string, r io.Reader, mode uint32) (sandbox.FileInfo, error) {
	panic("unimplemented")
}

// BackendHealth is one driver's probe, as GET /v1/health shows it.
type BackendHealth struct {
	Name      string
	Available bool
	Primary   bool // the one new sandboxes go to
	Level     string
	Sandbox   bool
	Layers    map[string]sandbox.LayerState
	Reasons   []string
}

// Health probes every configured driver.
func (m *Manager) Health(ctx context.Context) []BackendHealth { panic("unimplemented") }

// Key is an API key's identity (never its secret).
type Key struct {
	ID   string
	Name string
}

// Authenticate returns the key whose secret is token (compared by hash, in
// constant time), or an error wrapping sandbox.ErrUnauthenticated.
func (m *Manager) Authenticate(ctx context.Context, token string) (Key, error) {
	panic("unimplemented")
}
