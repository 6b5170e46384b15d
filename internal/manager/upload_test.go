package manager

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"sbx.dev/sbx/internal/sandbox"
)

// countingReader counts what is read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// An upload announcing more than the sandbox's disk quota fails before a
// byte is read or the agent is called, naming the quota and the sandbox.
func TestUploadOverQuotaRefusedUnread(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, sandbox.CreateRequest{DiskBytes: 16 * sandbox.MiB})
	for _, call := range []struct {
		op string
		do func(r io.Reader) error
	}{
		{"upload", func(r io.Reader) error {
			_, err := e.m.Upload(t.Context(), sb.ID, "/workspace/f", r, 16*sandbox.MiB+1, 0)
			return err
		}},
		{"upload_archive", func(r io.Reader) error {
			_, err := e.m.UploadArchive(t.Context(), sb.ID, "/workspace/d", r, 17*sandbox.MiB, sandbox.ArchiveLimits{})
			return err
		}},
	} {
		body := &countingReader{r: bytes.NewReader(make([]byte, 20<<20))}
		err := call.do(body)
		if !errors.Is(err, sandbox.ErrTooLarge) || !strings.HasPrefix(err.Error(), call.op+" "+string(sb.ID)+": ") ||
			!strings.Contains(err.Error(), "disk quota (disk_mb 16, 16777216 bytes)") {
			t.Errorf("%s over the quota = %v, want too large naming the quota and the sandbox", call.op, err)
		}
		if body.n != 0 {
			t.Errorf("%s over the quota read %d bytes of the body", call.op, body.n)
		}
	}
}

// A stream is passed through up to the cap and cut one byte past it.
func TestCappedBody(t *testing.T) {
	for _, tc := range []struct {
		size    int
		wantErr bool
	}{
		{0, false},
		{1000, false},
		{1024, false},
		{1025, true},
		{1 << 20, true},
	} {
		b := &cappedBody{r: bytes.NewReader(make([]byte, tc.size)), max: 1024, op: "upload", id: "x"}
		n, err := io.Copy(io.Discard, b)
		if tc.wantErr {
			if !errors.Is(err, sandbox.ErrTooLarge) || !b.hit.Load() || n != 1024 {
				t.Errorf("%d bytes through a 1024-byte cap: passed %d, %v (hit %t), want 1024 and too large", tc.size, n, err, b.hit.Load())
			}
		} else if err != nil || b.hit.Load() || n != int64(tc.size) {
			t.Errorf("%d bytes through a 1024-byte cap: passed %d, %v (hit %t)", tc.size, n, err, b.hit.Load())
		}
	}
}

// An upload whose caller's stream breaks off fails with that stream's error
// (a timeout stays a timeout for the audit log), not the agent's cut stream;
// one past the quota is too large; otherwise the agent's error stands.
func TestUploadSourceFailure(t *testing.T) {
	agentCut := &sandbox.Error{Op: "upload", ID: "x", Err: fmt.Errorf("%w: the connection to the agent broke", sandbox.ErrAgentLost)}
	slow := fmt.Errorf("request body too slow: %w", sandbox.ErrTimeout)
	b := &cappedBody{r: io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(slow)), max: 1 << 20, op: "upload", id: "x"}
	io.Copy(io.Discard, b)
	if err := b.failed(t.Context(), agentCut); !errors.Is(err, sandbox.ErrTimeout) || errors.Is(err, sandbox.ErrAgentLost) {
		t.Errorf("slow caller: failed = %v, want the timeout", err)
	}
	b = &cappedBody{r: strings.NewReader(strings.Repeat("x", 10)), max: 5, op: "upload", id: "x"}
	io.Copy(io.Discard, b)
	if err := b.failed(t.Context(), agentCut); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Errorf("past the quota: failed = %v, want too large", err)
	}
	b = &cappedBody{r: strings.NewReader("abc"), max: 5, op: "upload", id: "x"}
	io.Copy(io.Discard, b)
	if err := b.failed(t.Context(), agentCut); !errors.Is(err, sandbox.ErrAgentLost) {
		t.Errorf("the caller's stream was whole: failed = %v, want the agent's error", err)
	}
}
