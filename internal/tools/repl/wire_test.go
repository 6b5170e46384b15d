package repl

import (
	"strings"
	"testing"
)

func TestReaderFindsResponsesAmongStrayOutput(t *testing.T) {
	var r reader
	log := "boot noise\npartial" + sentinel + `{"type":"ready","python":"3.11.2","protocol":1}` + "\n" +
		sentinel + `{"type":"result","id":"a"` // the rest comes in the next read
	r.add([]byte(log), 0, int64(len(log)), true)
	m, ok := r.next()
	if !ok || m.Type != "ready" || m.Python != "3.11.2" || m.Protocol != 1 {
		t.Fatalf("first response %+v %v", m, ok)
	}
	if _, ok := r.next(); ok {
		t.Fatal("a response from half a line")
	}
	rest := `,"stdout":"x"}` + "\n"
	r.add([]byte(rest), int64(len(log)), int64(len(log)+len(rest)), true)
	if m, ok := r.next(); !ok || m.Type != "result" || m.ID != "a" || !strings.Contains(string(m.raw), `"stdout":"x"`) {
		t.Fatalf("second response %+v %v", m, ok)
	}
	if got := r.said(); got != "its last output: boot noise\npartial" {
		t.Errorf("stray output %q", got)
	}
}

func TestReaderDropsALineCutByLostBytes(t *testing.T) {
	var r reader
	first := sentinel + `{"type":"pong","id":"old"`
	r.add([]byte(first), 0, int64(len(first)), true)
	// Bytes 100..199 were lost: the line in the making is dropped, the
	// next one is read.
	next := `tail of something"}` + "\n" + sentinel + `{"type":"pong","id":"new"}` + "\n"
	r.add([]byte(next), 200, int64(200+len(next)), true)
	m, ok := r.next()
	if !ok || m.ID != "new" {
		t.Fatalf("after a loss: %+v %v", m, ok)
	}
}

func TestReaderEndsWithTheProcess(t *testing.T) {
	var r reader
	r.add([]byte("sbx: python3: command not found"), 0, 31, false)
	if _, ok := r.next(); ok || r.exited {
		t.Fatalf("exited %v before a read came back empty", r.exited)
	}
	r.add(nil, 31, 31, false)
	if _, ok := r.next(); ok || !r.exited || !notFound(r.said()) {
		t.Fatalf("exited %v, stray %q", r.exited, r.said())
	}
}

func TestReplyText(t *testing.T) {
	for _, c := range []struct {
		code       int
		body, want string
		err        string
	}{
		{200, `{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`, "hi", ""},
		{200, `{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}}]}`, "ab", ""},
		{200, `{"choices":[{"message":{"content":null}}]}`, "", ""},
		{200, `{"choices":[]}`, "", "has no choices"},
		{200, `<html>`, "", "not a chat completion"},
		{401, `{"error":{"message":"bad key"}}`, "", "the model endpoint answered 401 Unauthorized: bad key"},
		{502, `upstream down`, "", "the model endpoint answered 502 Bad Gateway: upstream down"},
	} {
		status := map[int]string{200: "200 OK", 401: "401 Unauthorized", 502: "502 Bad Gateway"}[c.code]
		got, err := replyText(status, c.code, []byte(c.body))
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.body, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one holding %q", c.body, err, c.err)
		}
	}
}
