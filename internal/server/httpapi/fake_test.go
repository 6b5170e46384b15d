package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx/internal/manager"
	"sbx/internal/sandbox"
	"sbx/internal/testutil"
)

const testKey = "sbx_test_key"

// fakeService stands in for the manager: it admits through the default policy,
// keeps sandboxes in memory, and runs exec from a script of events. Methods it
// does not define panic through the nil embedded interface.
type fakeService struct {
	service
	policy sandbox.Policy

	mu        sync.Mutex
	sandboxes map[sandbox.ID]sandbox.Sandbox
	files     map[string][]byte
	// events are what Exec sends, before its result.
	events []sandbox.ExecEvent
	result sandbox.ExecResult
	// err, when set, is what every sandbox call returns.
	err error
	// uploaded counts the bytes an Upload read, uploadSize is the size it
	// was given; an upload announcing more than uploadQuota (when set) fails
	// unread, as the manager's does.
	uploaded    int64
	uploadSize  int64
	uploadQuota int64
	// callers are the keys the calls carried (manager.KeyFrom), in order.
	callers []manager.Key
	// idem maps an idempotency key to its request and sandbox.
	idem map[string]idemEntry
	// audit is what Audit returns; auditQuery the query it was last given.
	audit      []manager.AuditRecord
	auditQuery manager.AuditQuery
}

type idemEntry struct {
	req string
	id  sandbox.ID
}

func newFake() *fakeService {
	return &fakeService{
		policy:    sandbox.DefaultPolicy(),
		sandboxes: map[sandbox.ID]sandbox.Sandbox{},
		files:     map[string][]byte{},
		idem:      map[string]idemEntry{},
		result:    sandbox.ExecResult{ProcessID: "p1", PID: 7, ExitCode: 0, Reason: sandbox.ReasonExited},
	}
}

func (f *fakeService) Authenticate(ctx context.Context, token string) (manager.Key, error) {
	if token == "" {
		return manager.Key{}, fmt.Errorf("%w: no API key given", sandbox.ErrUnauthenticated)
	}
	if token != testKey {
		return manager.Key{}, fmt.Errorf("%w: invalid API key", sandbox.ErrUnauthenticated)
	}
	return manager.Key{ID: "k1", Name: "admin", Admin: true}, nil
}

func (f *fakeService) Health(ctx context.Context) []manager.BackendHealth {
	return []manager.BackendHealth{{Name: "fake", Available: true, Primary: true, Level: "fake", Sandbox: true,
		Layers: map[string]sandbox.LayerState{"pidns": sandbox.Applied}}}
}

func (f *fakeService) Pool() manager.PoolStatus { return manager.PoolStatus{Size: 2, Ready: 1} }

func (f *fakeService) Quarantined(context.Context) []sandbox.ID { return nil }

func (f *fakeService) lookup(op string, id sandbox.ID) (sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: f.err}
	}
	sb, ok := f.sandboxes[id]
	if !ok {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	return sb, nil
}

func (f *fakeService) Create(ctx context.Context, req sandbox.CreateRequest) (sandbox.Sandbox, error) {
	if k, ok := manager.KeyFrom(ctx); ok {
		f.mu.Lock()
		f.callers = append(f.callers, k)
		f.mu.Unlock()
	}
	if f.err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: "create", Err: f.err}
	}
	spec, err := f.policy.Admit(req)
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: "create", Err: err}
	}
	spec.ID = sandbox.NewID()
	now := time.Now()
	sb := sandbox.Sandbox{ID: spec.ID, State: sandbox.StateRunning, Backend: "fake", Spec: spec, CreatedAt: now, ExpiresAt: now.Add(spec.TTL),
		Isolation: sandbox.Isolation{Backend: "fake", Level: "fake", Layers: map[string]sandbox.LayerState{"pidns": sandbox.Applied}, Sandbox: true, Cgroup: "v2"}}
	f.mu.Lock()
	f.sandboxes[sb.ID] = sb
	f.mu.Unlock()
	return sb, nil
}

// CreateIdempotent keeps the manager's contract in small: same key and request
// replay, same key and another request conflict.
func (f *fakeService) CreateIdempotent(ctx context.Context, req sandbox.CreateRequest, key string) (sandbox.Sandbox, bool, error) {
	if err := manager.CheckIdempotencyKey(key); err != nil {
		return sandbox.Sandbox{}, false, &sandbox.Error{Op: "create", Err: err}
	}
	body := fmt.Sprintf("%+v", req)
	f.mu.Lock()
	e, ok := f.idem[key]
	f.mu.Unlock()
	if ok {
		if e.req != body {
			return sandbox.Sandbox{}, false, &sandbox.Error{Op: "create", ID: e.id,
				Err: fmt.Errorf("%w: idempotency key %q was used with a different request", sandbox.ErrExists, key)}
		}
		sb, err := f.lookup("create", e.id)
		return sb, true, err
	}
	sb, err := f.Create(ctx, req)
	if err == nil {
		f.mu.Lock()
		f.idem[key] = idemEntry{req: body, id: sb.ID}
		f.mu.Unlock()
	}
	return sb, false, err
}

func (f *fakeService) Audit(ctx context.Context, q manager.AuditQuery) ([]manager.AuditRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auditQuery = q
	if f.err != nil {
		return nil, &sandbox.Error{Op: "audit", Err: f.err}
	}
	return f.audit, nil
}

func (f *fakeService) Get(ctx context.Context, id sandbox.ID) (sandbox.Sandbox, error) {
	return f.lookup("get", id)
}

func (f *fakeService) List(ctx context.Context, labels map[string]string) ([]sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Sandbox
	for _, sb := range f.sandboxes {
		ok := true
		for k, v := range labels {
			ok = ok && sb.Spec.Labels[k] == v
		}
		if ok {
			out = append(out, sb)
		}
	}
	return out, nil
}

func (f *fakeService) Update(ctx context.Context, id sandbox.ID, u manager.Update) (sandbox.Sandbox, error) {
	sb, err := f.lookup("update", id)
	if err != nil {
		return sb, err
	}
	if u.Timeout != nil {
		sb.ExpiresAt = time.Now().Add(*u.Timeout)
	}
	if u.Labels != nil {
		sb.Spec.Labels = u.Labels
	}
	f.mu.Lock()
	f.sandboxes[id] = sb
	f.mu.Unlock()
	return sb, nil
}

func (f *fakeService) Delete(ctx context.Context, id sandbox.ID) error {
	if _, err := f.lookup("delete", id); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.sandboxes, id)
	f.mu.Unlock()
	return nil
}

func (f *fakeService) Exec(ctx context.Context, id sandbox.ID, req sandbox.ExecRequest, stream bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	if _, err := f.lookup("exec", id); err != nil {
		return nil, err
	}
	req, err := f.policy.AdmitExec(req)
	if err != nil {
		return nil, &sandbox.Error{Op: "exec", ID: id, Err: err}
	}
	send := func(ev sandbox.ExecEvent) error {
		if onEvent == nil {
			return nil
		}
		return onEvent(ev)
	}
	if err := send(sandbox.ExecEvent{Started: &sandbox.ProcessInfo{ID: f.result.ProcessID, PID: f.result.PID, Running: true}}); err != nil {
		return nil, err
	}
	if req.Background {
		return nil, nil
	}
	res := f.result
	for _, ev := range f.events {
		if ev.Stdout != nil {
			res.Stdout = append(res.Stdout, ev.Stdout...)
		}
		if ev.Stderr != nil {
			res.Stderr = append(res.Stderr, ev.Stderr...)
		}
		if stream {
			if err := send(ev); err != nil {
				return nil, err
			}
		}
	}
	if f.err != nil { // fails mid-stream when set after the lookup
		return nil, f.err
	}
	if len(req.Stdin) > 0 {
		res.Stdout = append(res.Stdout, req.Stdin...)
	}
	return &res, nil
}

func (f *fakeService) Processes(ctx context.Context, id sandbox.ID) ([]sandbox.ProcessInfo, error) {
	if _, err := f.lookup("list_processes", id); err != nil {
		return nil, err
	}
	return []sandbox.ProcessInfo{{ID: "p1", PID: 7, Argv: []string{"sleep", "1"}, Running: true}}, nil
}

func (f *fakeService) Process(ctx context.Context, id sandbox.ID, pid string) (sandbox.ProcessInfo, error) {
	if _, err := f.lookup("get_process", id); err != nil {
		return sandbox.ProcessInfo{}, err
	}
	if pid != "p1" {
		return sandbox.ProcessInfo{}, &sandbox.Error{Op: "get_process", ID: id, Err: fmt.Errorf("process %s %w", pid, sandbox.ErrNotFound)}
	}
	return sandbox.ProcessInfo{ID: "p1", PID: 7, Argv: []string{"sleep", "1"}, Running: true}, nil
}

func (f *fakeService) Signal(ctx context.Context, id sandbox.ID, pid string, sig int) (string, error) {
	if _, err := f.lookup("signal", id); err != nil {
		return "", err
	}
	if sig == 9 {
		return sandbox.OutcomeStopped, nil
	}
	return sandbox.OutcomeSignaled, nil
}

func (f *fakeService) WriteFile(ctx context.Context, id sandbox.ID, path string, content []byte, mode uint32, appendTo bool) (sandbox.FileInfo, error) {
	if _, err := f.lookup("write_file", id); err != nil {
		return sandbox.FileInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if appendTo {
		content = append(f.files[path], content...)
	}
	f.files[path] = content
	return sandbox.FileInfo{Name: path, Path: path, Type: "file", Size: int64(len(content)), Mode: 0o644}, nil
}

func (f *fakeService) ReadFile(ctx context.Context, id sandbox.ID, path string, offset, limit int64) (sandbox.ReadResult, error) {
	if _, err := f.lookup("read_file", id); err != nil {
		return sandbox.ReadResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[path]
	if !ok {
		return sandbox.ReadResult{}, &sandbox.Error{Op: "read_file", ID: id, Err: fmt.Errorf("%s: %w", path, sandbox.ErrNotFound)}
	}
	end := min(int64(len(b)), offset+limit)
	return sandbox.ReadResult{Path: path, Content: b[min(offset, end):end], Offset: offset, Size: int64(len(b)), EOF: end == int64(len(b))}, nil
}

func (f *fakeService) Download(ctx context.Context, id sandbox.ID, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	if _, err := f.lookup("download", id); err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.files[path]
	return io.NopCloser(bytes.NewReader(b)), sandbox.FileInfo{Path: path, Type: "file", Size: int64(len(b))}, nil
}

func (f *fakeService) Upload(ctx context.Context, id sandbox.ID, path string, r io.Reader, size int64, mode uint32) (sandbox.FileInfo, error) {
	if _, err := f.lookup("upload", id); err != nil {
		return sandbox.FileInfo{}, err
	}
	f.mu.Lock()
	f.uploadSize = size
	quota := f.uploadQuota
	f.mu.Unlock()
	if quota > 0 && size > quota {
		return sandbox.FileInfo{}, &sandbox.Error{Op: "upload", ID: id, Err: fmt.Errorf("%w: over the disk quota", sandbox.ErrTooLarge)}
	}
	n, err := io.Copy(io.Discard, r)
	f.mu.Lock()
	f.uploaded = n
	f.mu.Unlock()
	if err != nil {
		return sandbox.FileInfo{}, &sandbox.Error{Op: "upload", ID: id, Err: err}
	}
	return sandbox.FileInfo{Path: path, Type: "file", Size: n, Mode: 0o644}, nil
}

// apiEnv is a server over a fake, on an httptest server.
type apiEnv struct {
	t    *testing.T
	f    *fakeService
	s    *server
	srv  *httptest.Server
	logs *bytes.Buffer
}

func newAPI(t *testing.T, opts Options) *apiEnv {
	t.Helper()
	testutil.CheckLeaks(t)
	f := newFake()
	if opts.Log == nil {
		opts.Log = testutil.Logger(t)
	}
	s := newServer(f, opts)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &apiEnv{t: t, f: f, s: s, srv: srv}
}

// do sends one request with the test key; body may be a string or nil.
func (e *apiEnv) do(method, path string, body string, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// sandbox creates one sandbox through the fake and returns its id.
func (e *apiEnv) sandbox() string {
	e.t.Helper()
	sb, err := e.f.Create(context.Background(), sandbox.CreateRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	return string(sb.ID)
}
