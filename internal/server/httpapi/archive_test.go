package httpapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/sandbox"
)

// archiveCall sends one request with the admin key, streaming body when it is
// not nil, and returns the response and its body, or the error that broke them.
func archiveCall(e *apiEnv, method, path string, body io.Reader) (*http.Response, []byte, error) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, body)
	req.Header.Set("Authorization", "Bearer "+e.token)
	if body != nil {
		req.ContentLength = -1
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return &http.Response{}, nil, err // a response broken before its header
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// tarEntry is one entry of a tarball: its header, whose size tarball sets,
// and its content.
type tarEntry struct {
	hdr  tar.Header
	data []byte
}

// tarball returns a tar of entries, gzip-compressed when gz is set.
func tarball(t *testing.T, gz bool, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	var w io.Writer = &buf
	if gz {
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, en := range entries {
		hdr := en.hdr
		hdr.Size = int64(len(en.data))
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(en.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if gz {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// The archive passes through the API as opaque bytes: a gzip body reaches the
// agent compressed, byte for byte, with the caps the caller gave.
func TestUploadArchivePassesThrough(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	big := make([]byte, 4<<20)
	rand.Read(big) // incompressible: the body is as large on the wire
	body := tarball(t, true,
		tarEntry{tar.Header{Typeflag: tar.TypeDir, Name: "sub/", Mode: 0o755}, nil},
		tarEntry{tar.Header{Typeflag: tar.TypeReg, Name: "sub/big", Mode: 0o644}, big},
		tarEntry{tar.Header{Typeflag: tar.TypeReg, Name: "a.txt", Mode: 0o640}, []byte("hello")},
		tarEntry{tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666}, nil})
	resp, b, _ := archiveCall(e, "PUT", "/v1/sandboxes/"+id+"/files/archive?path=/workspace/d&max_bytes=8388608&max_entries=7", bytes.NewReader(body))
	var res openapi.ArchiveResult
	if resp.StatusCode != 200 || json.Unmarshal(b, &res) != nil || res.Path != "/workspace/d" || res.Entries != 3 || res.Bytes != int64(len(big))+5 ||
		res.SkippedCount != 1 || len(res.Skipped) != 1 || res.Skipped[0] != (openapi.ArchiveSkip{Name: "dev/null", Type: "char device", Reason: "device nodes are not extracted"}) {
		t.Fatalf("PUT files/archive = %d %s", resp.StatusCode, b)
	}
	got := e.d.Archives(sandbox.ID(id))
	if len(got) != 1 || got[0].SHA256 != sha256.Sum256(body) || got[0].Size != int64(len(body)) || got[0].Dir != "/workspace/d" {
		t.Fatalf("the agent got %+v, want the %d bytes sent, unchanged", got, len(body))
	}
	// The caller's caps, and the sandbox's disk quota (1 GiB by default) from the manager.
	if want := (sandbox.ArchiveLimits{MaxBytes: 8 << 20, MaxEntries: 7, QuotaBytes: 1 << 30}); got[0].Limits != want {
		t.Errorf("limits = %+v, want %+v", got[0].Limits, want)
	}
	if _, b := e.do("GET", "/v1/sandboxes/"+id+"/files/read?path=/workspace/d/a.txt", ""); !strings.Contains(string(b), `"content":"hello"`) {
		t.Errorf("an extracted file reads %s", b)
	}

	for _, q := range []string{"", "?path=", "?path=d&max_bytes=0", "?path=d&max_entries=x", "?path=d&path=e"} {
		resp, b, _ := archiveCall(e, "PUT", "/v1/sandboxes/"+id+"/files/archive"+q, strings.NewReader("x"))
		if resp.StatusCode != 400 || !strings.Contains(string(b), "invalid_argument") {
			t.Errorf("PUT files/archive%s = %d %s, want 400", q, resp.StatusCode, b)
		}
	}
	if n := len(e.d.Archives(sandbox.ID(id))); n != 1 {
		t.Errorf("refused archives reached the agent: it got %d, want 1", n)
	}

	three := tarball(t, false,
		tarEntry{tar.Header{Typeflag: tar.TypeReg, Name: "x", Mode: 0o644}, []byte("x")},
		tarEntry{tar.Header{Typeflag: tar.TypeReg, Name: "y", Mode: 0o644}, []byte("y")},
		tarEntry{tar.Header{Typeflag: tar.TypeReg, Name: "z", Mode: 0o644}, []byte("z")})
	resp, b, _ = archiveCall(e, "PUT", "/v1/sandboxes/"+id+"/files/archive?path=e&max_entries=2", bytes.NewReader(three))
	d := decodeErr(t, b)
	if resp.StatusCode != 413 || d.Code != openapi.CodeOutOfRange || d.SandboxID != id || !strings.Contains(d.Message, "max_entries") {
		t.Errorf("cap hit = %d %+v, want 413 out_of_range naming the cap and the sandbox", resp.StatusCode, d)
	}
}

// A download that fails after the status is sent must not read as complete.
func TestDownloadArchiveBreaksOnError(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	const first = "the first bytes of an archive"
	if resp, b := e.do("PUT", "/v1/sandboxes/"+id+"/files/write", `{"path":"/workspace/d/a","content":"`+first+`"}`); resp.StatusCode != 200 {
		t.Fatalf("write = %d %s", resp.StatusCode, b)
	}
	resp, b, err := archiveCall(e, "GET", "/v1/sandboxes/"+id+"/files/archive?path=/workspace/d&gzip=true", nil)
	if resp.StatusCode != 200 || err != nil ||
		resp.Header.Get("Content-Type") != "application/gzip" || !strings.Contains(resp.Header.Get("Content-Disposition"), `filename=d.tar.gz`) {
		t.Fatalf("GET files/archive = %d %q %v %v", resp.StatusCode, b, err, resp.Header)
	}
	// The directory and the flag reached the agent: the body is its files, gzip-compressed.
	var hdr *tar.Header
	var data []byte
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err == nil {
		tr := tar.NewReader(zr)
		if hdr, err = tr.Next(); err == nil {
			data, err = io.ReadAll(tr)
		}
	}
	if err != nil || hdr.Name != "a" || string(data) != first {
		t.Errorf("the archive holds %+v %q (%v), want a, %q", hdr, data, err, first)
	}

	// The fake agent keeps only the start of a larger file: an archive of it
	// breaks off after the status is sent.
	if resp, b, err := archiveCall(e, "PUT", "/v1/sandboxes/"+id+"/files/upload?path=/workspace/d/z", bytes.NewReader(make([]byte, fake.MaxKept+1))); resp.StatusCode != 200 {
		t.Fatalf("upload = %d %s %v", resp.StatusCode, b, err)
	}
	resp, _, err = archiveCall(e, "GET", "/v1/sandboxes/"+id+"/files/archive?path=d", nil)
	if resp.StatusCode != 200 || err == nil {
		t.Errorf("a download broken mid-stream = %d, %v; want 200 and a broken body", resp.StatusCode, err)
	}
	resp, _, _ = archiveCall(e, "GET", "/v1/sandboxes/"+id+"/files/archive?path=d&gzip=maybe", nil)
	if resp.StatusCode != 400 {
		t.Errorf("gzip=maybe = %d, want 400", resp.StatusCode)
	}
}
