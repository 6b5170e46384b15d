package testutil

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// EarlyAnswer is an upstream that answers before it has read its request's
// body: it sends its headers and "early\n" at once, then echoes the body as
// it comes. A stream's server does the same when it answers on a request's
// first bytes; the proxy before it must still pass on the rest of the body
// after its answer began (full duplex).
func EarlyAnswer() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "early\n")
		rc.Flush()
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				rc.Flush()
			}
			if err != nil {
				return
			}
		}
	})
}

// CheckFullDuplex sends req (its URL and headers; the body is set here)
// through a proxy to an EarlyAnswer upstream, with a body of known length
// sent in two parts: the second only once the answer's first line came
// back. It fails t unless the answer is that line and then the whole body.
// A proxy that does not serve full duplex (fullduplex.Serve says why it
// must) sends no answer at all: its server drains the body before the
// answer begins, waiting for a second part the client holds back.
func CheckFullDuplex(t *testing.T, c *http.Client, req *http.Request) {
	t.Helper()
	const first, second = "the first part of the body\n", "the second part\n"
	ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	// A transport sending the body waits for it even when ctx ends.
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	defer stop()
	req = req.WithContext(ctx)
	req.Body = pr
	req.ContentLength = int64(len(first) + len(second))
	// The upstream answers before it reads anything: the answer's first
	// line may come back before this goroutine ran, and the second part
	// must still go after the first.
	firstSent := make(chan error, 1)
	go func() {
		_, err := io.WriteString(pw, first)
		firstSent <- err
	}()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s with its body still coming: %v (no answer while the client held back the rest of its body: the proxy is not full duplex)", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	line := make([]byte, len("early\n"))
	if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != "early\n" {
		t.Fatalf("%s %s: answer %d began %q, %v; want the upstream's early line", req.Method, req.URL, resp.StatusCode, line, err)
	}
	if err := <-firstSent; err != nil {
		t.Fatalf("sending the body's first part: %v", err)
	}
	if _, err := io.WriteString(pw, second); err != nil {
		t.Fatalf("sending the body's second part after the answer began: %v", err)
	}
	pw.Close()
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != first+second {
		t.Fatalf("%s %s: after the early line the answer was %q, %v; want the whole body echoed: %q", req.Method, req.URL, rest, err, first+second)
	}
}
