package repl

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
)

// The wire protocol. Requests are JSON objects, one a line, on the driver's
// stdin; responses are JSON objects, one a line, on its original stdout, each
// after sentinel. JSON escapes every control character inside strings, so a
// response never holds a newline or the sentinel's \x1e: a line's last
// sentinel starts the response, whatever came before it on the line.
const sentinel = "\x1esbx-repl "

// protocolVersion is the driver's: a driver found running that speaks
// another (started by an older sbx) is replaced.
const protocolVersion = 2

// Requests.
type (
	executeRequest struct {
		Type   string            `json:"type"` // "execute"
		ID     string            `json:"id"`
		Code   string            `json:"code"`
		Env    map[string]string `json:"env,omitempty"`
		Stream bool              `json:"stream,omitempty"` // send output responses while the cell runs
		Rich   bool              `json:"rich,omitempty"`   // rich representations (data, displays)
	}
	pingRequest struct {
		Type string `json:"type"` // "ping"
		ID   string `json:"id"`
	}
	// llmAnswer answers the llm_query QID with Text or Error.
	llmAnswer struct {
		Type  string `json:"type"` // "llm_answer"
		QID   string `json:"qid"`
		Text  string `json:"text,omitempty"`
		Error string `json:"error,omitempty"`
	}
)

// message is any response; raw is its JSON, from which a result's fields
// are decoded.
type message struct {
	// ready, fatal, pong, result, output, llm_query or error.
	Type string `json:"type"`
	// ID is the request's (pong, result, error) or the cell's (llm_query,
	// output).
	ID string `json:"id"`
	// output: what the cell wrote to Stream ("stdout" or "stderr").
	Stream string `json:"stream"`
	Text   string `json:"text"`
	// llm_query: QID names the query; System is null when not given.
	QID    string  `json:"qid"`
	Prompt string  `json:"prompt"`
	System *string `json:"system"`
	// fatal and error: why.
	Message string `json:"message"`
	// ready and pong.
	Python   string `json:"python"`
	Protocol int    `json:"protocol"`
	// pong: Busy says a cell (Cell) is running and waits for an llm_answer.
	Busy bool   `json:"busy"`
	Cell string `json:"cell"`

	raw []byte
}

// reader splits a process's output log into lines from a cursor on.
type reader struct {
	cursor  int64
	buf     []byte // read, not yet a whole line
	scanned int    // buf[:scanned] holds no newline
	exited  bool   // the process exited and all its output was read
	stray   []byte // the end of what was not a response: why a driver died
}

// strayKeep is how much of the output that is not a response is kept to
// explain a failure (Python's own errors, the agent's "command not found").
const strayKeep = 2048

// add takes one ReadOutput answer.
func (r *reader) add(data []byte, start, cursor int64, alive bool) {
	if start > r.cursor {
		// Bytes were lost: the partial line is cut, and no response can
		// start inside it, so it is dropped.
		r.buf, r.scanned = nil, 0
	}
	r.buf = append(r.buf, data...)
	if cursor > r.cursor {
		r.cursor = cursor
	}
	if !alive && len(data) == 0 {
		r.exited = true
	}
}

// line returns the next whole line; once the process exited, what is left
// counts as one.
func (r *reader) line() ([]byte, bool) {
	if i := bytes.IndexByte(r.buf[r.scanned:], '\n'); i >= 0 {
		n := r.scanned + i
		line := r.buf[:n]
		r.buf, r.scanned = r.buf[n+1:], 0
		if len(r.buf) == 0 {
			r.buf = nil
		}
		return line, true
	}
	r.scanned = len(r.buf)
	if r.exited && len(r.buf) > 0 {
		line := r.buf
		r.buf, r.scanned = nil, 0
		return line, true
	}
	return nil, false
}

// next returns the next response among the lines read so far, keeping the
// rest as stray output.
func (r *reader) next() (*message, bool) {
	for {
		line, ok := r.line()
		if !ok {
			return nil, false
		}
		i := bytes.LastIndex(line, []byte(sentinel))
		if i < 0 {
			r.noteStray(line)
			continue
		}
		r.noteStray(line[:i])
		raw := bytes.Clone(line[i+len(sentinel):])
		m := &message{raw: raw}
		if err := json.Unmarshal(raw, m); err != nil {
			r.noteStray(line)
			continue
		}
		return m, true
	}
}

func (r *reader) noteStray(b []byte) {
	if len(b) == 0 {
		return
	}
	r.stray = append(r.stray, b...)
	r.stray = append(r.stray, '\n')
	if len(r.stray) > strayKeep {
		r.stray = append([]byte(nil), r.stray[len(r.stray)-strayKeep:]...)
	}
}

// said is the end of the stray output, for a message on why the process
// ended: "its last output: ..." or "it printed nothing".
func (r *reader) said() string {
	s := string(bytes.TrimSpace(r.stray))
	if s == "" {
		return "it printed nothing"
	}
	return "its last output: " + s
}

// newID returns a random request id: a response that echoes it cannot be
// one to an earlier request, however the stream was cut.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
