package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"sbx/api/openapi"
	"sbx/internal/sandbox"
	"sbx/internal/testutil"
)

// archiveFake adds the archive calls to the fake: UploadArchive hashes what
// reaches it, DownloadArchive serves body and then fails with bodyErr.
type archiveFake struct {
	*fakeService

	mu      sync.Mutex
	sum     [32]byte
	n       int64
	dir     string
	lim     sandbox.ArchiveLimits
	gzip    bool
	result  error
	body    []byte
	bodyErr error
}

func (f *archiveFake) UploadArchive(ctx context.Context, id sandbox.ID, dir string, r io.Reader, size int64, lim sandbox.ArchiveLimits) (sandbox.ArchiveResult, error) {
	if _, err := f.lookup("upload_archive", id); err != nil {
		return sandbox.ArchiveResult{}, err
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	f.mu.Lock()
	defer f.mu.Unlock()
	copy(f.sum[:], h.Sum(nil))
	f.n, f.dir, f.lim = n, dir, lim
	if err == nil {
		err = f.result
	}
	if err != nil {
		return sandbox.ArchiveResult{}, &sandbox.Error{Op: "upload_archive", ID: id, Err: err}
	}
	return sandbox.ArchiveResult{Path: dir, Entries: 3, Bytes: n, Skipped: []sandbox.ArchiveSkip{{Name: "dev/null", Type: "char device", Reason: "device nodes are not extracted"}}, SkippedCount: 1}, nil
}

func (f *archiveFake) DownloadArchive(ctx context.Context, id sandbox.ID, dir string, gzip bool) (io.ReadCloser, error) {
	if _, err := f.lookup("download_archive", id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dir, f.gzip = dir, gzip
	return io.NopCloser(io.MultiReader(bytes.NewReader(f.body), errReader{f.bodyErr})), nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) {
	if r.err == nil {
		return 0, io.EOF
	}
	return 0, r.err
}

func newArchiveAPI(t *testing.T) (*archiveFake, *httptest.Server, string) {
	t.Helper()
	testutil.CheckLeaks(t)
	f := &archiveFake{fakeService: newFake()}
	srv := httptest.NewServer(newServer(f, Options{Log: testutil.Logger(t)}))
	t.Cleanup(srv.Close)
	sb, err := f.Create(context.Background(), sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return f, srv, string(sb.ID)
}

func archiveCall(t *testing.T, srv *httptest.Server, method, path string, body io.Reader) (*http.Response, []byte, error) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, body)
	req.Header.Set("Authorization", "Bearer "+testKey)
	if body != nil {
		req.ContentLength = -1
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return &http.Response{}, nil, err // a response broken before its header
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// The archive passes through the API as opaque bytes: a gzip body reaches the
// manager compressed, byte for byte.
func TestUploadArchivePassesThrough(t *testing.T) {
	f, srv, id := newArchiveAPI(t)
	body := append([]byte{0x1f, 0x8b}, bytes.Repeat([]byte("not really gzip, and never opened here "), 100000)...)
	resp, b, _ := archiveCall(t, srv, "PUT", "/v1/sandboxes/"+id+"/files/archive?path=/workspace/d&max_bytes=4096&max_entries=7", bytes.NewReader(body))
	var res openapi.ArchiveResult
	if resp.StatusCode != 200 || json.Unmarshal(b, &res) != nil || res.Path != "/workspace/d" || res.SkippedCount != 1 || res.Skipped[0].Type != "char device" {
		t.Fatalf("PUT files/archive = %d %s", resp.StatusCode, b)
	}
	if f.sum != sha256.Sum256(body) || f.n != int64(len(body)) {
		t.Errorf("the manager got %d bytes that differ from the %d sent", f.n, len(body))
	}
	if f.lim != (sandbox.ArchiveLimits{MaxBytes: 4096, MaxEntries: 7}) {
		t.Errorf("limits = %+v, want 4096 bytes, 7 entries", f.lim)
	}

	for _, q := range []string{"", "?path=", "?path=d&max_bytes=0", "?path=d&max_entries=x", "?path=d&path=e"} {
		resp, b, _ := archiveCall(t, srv, "PUT", "/v1/sandboxes/"+id+"/files/archive"+q, strings.NewReader("x"))
		if resp.StatusCode != 400 || !strings.Contains(string(b), "invalid_argument") {
			t.Errorf("PUT files/archive%s = %d %s, want 400", q, resp.StatusCode, b)
		}
	}

	f.result = fmt.Errorf("%w: the archive has more than 7 entries (max_entries)", sandbox.ErrTooLarge)
	resp, b, _ = archiveCall(t, srv, "PUT", "/v1/sandboxes/"+id+"/files/archive?path=d", strings.NewReader("x"))
	e := decodeErr(t, b)
	if resp.StatusCode != 413 || e.Code != openapi.CodeOutOfRange || e.SandboxID != id || !strings.Contains(e.Message, "max_entries") {
		t.Errorf("cap hit = %d %+v, want 413 out_of_range naming the cap and the sandbox", resp.StatusCode, e)
	}
}

// A download that fails after the status is sent must not read as complete.
func TestDownloadArchiveBreaksOnError(t *testing.T) {
	f, srv, id := newArchiveAPI(t)
	f.body = []byte("the first bytes of an archive")
	resp, b, err := archiveCall(t, srv, "GET", "/v1/sandboxes/"+id+"/files/archive?path=/workspace/d&gzip=true", nil)
	if resp.StatusCode != 200 || err != nil || string(b) != string(f.body) || !f.gzip || f.dir != "/workspace/d" ||
		resp.Header.Get("Content-Type") != "application/gzip" || !strings.Contains(resp.Header.Get("Content-Disposition"), `filename=d.tar.gz`) {
		t.Fatalf("GET files/archive = %d %q %v %v", resp.StatusCode, b, err, resp.Header)
	}
	f.bodyErr = errors.New("agent went away")
	_, _, err = archiveCall(t, srv, "GET", "/v1/sandboxes/"+id+"/files/archive?path=d", nil)
	if err == nil {
		t.Errorf("a download broken mid-stream read as complete")
	}
	resp, _, _ = archiveCall(t, srv, "GET", "/v1/sandboxes/"+id+"/files/archive?path=d&gzip=maybe", nil)
	if resp.StatusCode != 400 {
		t.Errorf("gzip=maybe = %d, want 400", resp.StatusCode)
	}
}
