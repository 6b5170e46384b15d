package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/testutil"
)

// rateTest is an API on a real net/http server (deadlines need a
// connection) with a short grace and a rate of 1 KiB/s, and one sandbox.
type rateTest struct {
	*apiEnv
	id   string
	opts Options
}

func newRateTest(t *testing.T) *rateTest {
	t.Helper()
	opts := Options{Log: testutil.Logger(t), BodyGrace: 300 * time.Millisecond, BodyMinRate: 1 << 10, BodyMaxStall: 2 * time.Second}
	e := newAPI(t, opts)
	return &rateTest{apiEnv: e, id: e.sandbox(`{}`), opts: opts}
}

// feed sends an upload's header announcing length bytes, then calls send
// with the connection until it returns; it returns the response, or an error
// when none came within limit (the server never hung up).
func (rt *rateTest) feed(length int, send func(c net.Conn), limit time.Duration) (*http.Response, string, error) {
	c, err := net.Dial("tcp", rt.srv.Listener.Addr().String())
	if err != nil {
		rt.t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT /v1/sandboxes/%s/files/upload?path=f HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", rt.id, rt.token, length)
	go send(c)
	c.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), nil
}

// trickle writes one byte every gap until a write fails.
func trickle(gap time.Duration) func(c net.Conn) {
	return func(c net.Conn) {
		for {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(gap)
		}
	}
}

// A body trickling in far below the minimum rate (slowloris) is cut off
// with 408 and the connection closed, instead of holding it for good.
func TestBodyTooSlow(t *testing.T) {
	rt := newRateTest(t)
	resp, b, err := rt.feed(1<<20, trickle(50*time.Millisecond), 20*time.Second)
	if err != nil {
		t.Fatalf("a body at 20 bytes/s, minimum rate 1 KiB/s: no answer (%v): the slow body holds the connection", err)
	}
	if resp.StatusCode != 408 || !resp.Close {
		t.Errorf("slow body = %d %s (close %t), want 408 and the connection closed", resp.StatusCode, b, resp.Close)
	}
	if d := decodeErr(t, []byte(b)); d.Code != "deadline_exceeded" || d.SandboxID != rt.id || !strings.Contains(d.Message, "request body too slow") {
		t.Errorf("slow body: %+v", d)
	}
}

// A body no handler reads (an unauthenticated request) is still bounded:
// net/http drains it before answering, and a trickle must not hold that.
func TestBodyUnreadIsBounded(t *testing.T) {
	rt := newRateTest(t)
	c, err := net.Dial("tcp", rt.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT /v1/sandboxes/%s/files/upload?path=f HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", rt.id)
	go func() {
		for {
			if _, err := c.Write([]byte("1\r\nx\r\n")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("an unauthenticated body trickling at 20 bytes/s: no answer (%v): draining it holds the connection", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || !resp.Close {
		t.Errorf("unauthenticated trickle = %d (close %t), want 401 and the connection closed", resp.StatusCode, resp.Close)
	}
}

// A body that arrives, then stops without ending, is cut off once it has
// paused for BodyMaxStall, however much time its bytes earned.
func TestBodyStalls(t *testing.T) {
	rt := newRateTest(t)
	resp, b, err := rt.feed(1<<20, func(c net.Conn) { c.Write(make([]byte, 64<<10)) }, 20*time.Second)
	if err != nil {
		t.Fatalf("a body that stops after 64 KiB: no answer (%v)", err)
	}
	if resp.StatusCode != 408 {
		t.Errorf("stalled body = %d %s, want 408", resp.StatusCode, b)
	}
}

// A body that takes several times the grace, at well over the minimum rate,
// arrives whole: each KiB buys time.
func TestBodyAboveRateIsNotCut(t *testing.T) {
	rt := newRateTest(t)
	const n = 48 << 10 // four times the grace at this speed
	began := time.Now()
	resp, b, err := rt.feed(n, func(c net.Conn) {
		chunk := make([]byte, 1<<10)
		for range n >> 10 {
			if _, err := c.Write(chunk); err != nil {
				return
			}
			time.Sleep(25 * time.Millisecond) // 40 KiB/s
		}
	}, 30*time.Second)
	var fi openapi.FileInfo
	if err != nil || resp.StatusCode != 200 || json.Unmarshal([]byte(b), &fi) != nil || fi.Size != n {
		t.Fatalf("a %d-byte body at 40 KiB/s over %s = %v %v %s; want all of it in the sandbox", n, time.Since(began).Round(time.Millisecond), resp, err, b)
	}
}

// Once the body is in, its deadline goes: a response that takes many times
// the grace (a long exec) is neither cut nor cancelled.
func TestBodyDeadlineLiftedAfterBody(t *testing.T) {
	rt := newRateTest(t)
	hold := 5 * rt.opts.BodyGrace // the body's deadline was about one grace after it began
	rt.d.Script("sleep 3", fake.Run{Delay: hold, ExitCode: 7})
	req, _ := http.NewRequest("POST", rt.srv.URL+"/v1/sandboxes/"+rt.id+"/exec", strings.NewReader(`{"command":"sleep 3"}`))
	req.Header.Set("Authorization", "Bearer "+rt.token)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := rt.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// A cut or cancelled request would end in an error event, not the result.
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"type":"result"`) || !strings.Contains(string(b), `"exit_code":7`) {
		t.Errorf("exec answering after %s = %d %s, want its result", hold, resp.StatusCode, b)
	}
}

func TestBodyRateDue(t *testing.T) {
	br := Options{}.bodyRate()
	start := time.Unix(1000, 0)
	for _, tc := range []struct {
		now  time.Duration // after start
		n    int64
		want time.Duration // after start
	}{
		{0, 0, 10 * time.Second},
		{time.Second, 1 << 10, 11 * time.Second},
		{time.Second, 1536, 11*time.Second + 500*time.Millisecond},
		{5 * time.Second, 1 << 30, 65 * time.Second}, // earned a million seconds; stalls are still bounded
		{time.Hour, 8 << 30, time.Hour + time.Minute},
	} {
		if got := br.due(start, start.Add(tc.now), tc.n).Sub(start); got != tc.want {
			t.Errorf("due(now=+%s, n=%d) = +%s, want +%s", tc.now, tc.n, got, tc.want)
		}
	}
}
