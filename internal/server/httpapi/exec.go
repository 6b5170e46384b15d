// This file implements exec and the process routes. A process belongs to the
// sandbox's agent: a request that ends stops following it, never the process.

package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

func execRequest(in openapi.ExecRequest) (sandbox.ExecRequest, error) {
	var errs []error
	req := sandbox.ExecRequest{
		Argv:          in.Argv,
		Shell:         in.Command,
		Cwd:           in.Cwd,
		Env:           in.Env,
		Secrets:       in.Secrets,
		KeepStdinOpen: in.KeepStdinOpen,
		Background:    in.Background,
		Tag:           in.Tag,
		StreamBounded: in.StreamBounded,
	}
	// The request's shape (command or argv, NUL bytes) is checked once, by
	// the policy's admission (sandbox.ExecRequest.Check); here only what the
	// wire itself carries.
	errs = append(errs, checkPath("cwd", in.Cwd, false), checkPath("tag", in.Tag, false))
	var err error
	if req.Stdin, err = textOrBase64("stdin", in.Stdin, in.StdinBase64); err != nil {
		errs = append(errs, err)
	}
	if req.Timeout, err = seconds("timeout", in.Timeout); err != nil {
		errs = append(errs, err)
	}
	if in.Pty != nil {
		if req.Pty, err = ptySize("pty", int64(in.Pty.Rows), int64(in.Pty.Cols)); err != nil {
			errs = append(errs, err)
		}
	}
	if in.OutputLimitBytes != nil {
		if *in.OutputLimitBytes < 1 {
			errs = append(errs, sandbox.Invalid("output_limit_bytes", "%d is below 1 (omit it for the default)", *in.OutputLimitBytes))
		} else {
			req.OutputLimitBytes = *in.OutputLimitBytes
		}
	}
	return req, errors.Join(errs...)
}

func (s *server) exec(w http.ResponseWriter, r *http.Request) error {
	var in openapi.ExecRequest
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	req, err := execRequest(in)
	if err != nil {
		return err
	}
	id := sandboxID(r)
	if req.Background {
		var started *sandbox.ProcessInfo
		_, err := s.m.Exec(r.Context(), id, req, false, func(ev sandbox.ExecEvent) error {
			if ev.Started != nil {
				started = ev.Started
			}
			return nil
		})
		if err != nil {
			return err
		}
		if started == nil {
			return &sandbox.Error{Op: "exec", ID: id, Err: errors.New("the agent sent no start event")}
		}
		return writeJSON(w, http.StatusAccepted, openapi.ProcessStarted{ProcessID: started.ID, PID: started.PID})
	}
	f, err := streamFormatOf(r, noStream)
	if err != nil {
		return err
	}
	if f == noStream {
		res, err := s.m.Exec(r.Context(), id, req, false, nil)
		if err != nil {
			return err
		}
		if res == nil {
			return &sandbox.Error{Op: "exec", ID: id, Err: errors.New("the agent sent no result")}
		}
		return writeJSON(w, http.StatusOK, wireResult(res))
	}
	return s.stream(w, r, f, func(onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
		return s.m.Exec(r.Context(), id, req, true, onEvent)
	})
}

func (s *server) processes(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.m.Processes(r.Context(), sandboxID(r))
	if err != nil {
		return err
	}
	out := openapi.ProcessList{Processes: make([]openapi.Process, 0, len(ps))}
	for _, p := range ps {
		out.Processes = append(out.Processes, wireProcess(p))
	}
	return writeJSON(w, http.StatusOK, out)
}

// processID is the {pid} of the route: the agent's process id.
func processID(r *http.Request) (string, error) {
	pid := r.PathValue("pid")
	if pid == "" || len(pid) > 128 || strings.IndexByte(pid, 0) >= 0 {
		return "", sandbox.Invalid("pid", "%q is not a process id", truncate(pid, 40))
	}
	return pid, nil
}

func (s *server) process(w http.ResponseWriter, r *http.Request) error {
	pid, err := processID(r)
	if err != nil {
		return err
	}
	p, err := s.m.Process(r.Context(), sandboxID(r), pid)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wireProcess(p))
}

func (s *server) attach(w http.ResponseWriter, r *http.Request) error {
	pid, err := processID(r)
	if err != nil {
		return err
	}
	q := newQuery(r)
	replay := q.bool("replay")
	if q.err != nil {
		return q.err
	}
	f, err := streamFormatOf(r, ndjson)
	if err != nil {
		return err
	}
	if f == noStream {
		f = ndjson
	}
	id := sandboxID(r)
	return s.stream(w, r, f, func(onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
		return s.m.Attach(r.Context(), id, pid, replay, onEvent)
	})
}

// defaultWait is how long POST …/wait waits when the body gives no timeout.
const defaultWait = 60 * time.Second

func (s *server) wait(w http.ResponseWriter, r *http.Request) error {
	pid, err := processID(r)
	if err != nil {
		return err
	}
	var in openapi.WaitRequest
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	timeout := defaultWait
	if in.Timeout != nil {
		if *in.Timeout < 0 || *in.Timeout > 3600 {
			return sandbox.Invalid("timeout", "%d s is outside [0, 3600] s", *in.Timeout)
		}
		timeout = time.Duration(*in.Timeout) * time.Second
	}
	p, err := s.m.WaitProcess(r.Context(), sandboxID(r), pid, timeout)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wireProcess(p))
}

func (s *server) stdin(w http.ResponseWriter, r *http.Request) error {
	pid, err := processID(r)
	if err != nil {
		return err
	}
	var in openapi.StdinRequest
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	data, err := textOrBase64("data", in.Data, in.DataBase64)
	if err != nil {
		return err
	}
	if len(data) == 0 && !in.EOF {
		return sandbox.Invalid("data", "give data, data_base64 or eof")
	}
	if err := s.m.WriteStdin(r.Context(), sandboxID(r), pid, data, in.EOF); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) signal(w http.ResponseWriter, r *http.Request) error {
	pid, err := processID(r)
	if err != nil {
		return err
	}
	var in openapi.SignalRequest
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	sig, err := parseSignal(in.Signal)
	if err != nil {
		return err
	}
	out, err := s.m.Signal(r.Context(), sandboxID(r), pid, sig)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, openapi.SignalResponse{Outcome: out})
}

// signals are the names a caller may give, without the SIG prefix.
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "ABRT": syscall.SIGABRT,
	"KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "PIPE": syscall.SIGPIPE,
	"ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP,
	"TSTP": syscall.SIGTSTP, "WINCH": syscall.SIGWINCH,
}

// parseSignal reads "SIGTERM", "TERM", "15" or 15; absent means SIGTERM.
func parseSignal(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return int(syscall.SIGTERM), nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, sandbox.Invalid("signal", "expected a name like \"SIGTERM\" or a number")
		}
		return checkSignal(n)
	}
	if n, err := strconv.Atoi(name); err == nil {
		return checkSignal(n)
	}
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]
	if !ok {
		return 0, sandbox.Invalid("signal", "%q is not a known signal", truncate(name, 20))
	}
	return int(sig), nil
}

func checkSignal(n int) (int, error) {
	if n < 1 || n > 64 {
		return 0, sandbox.Invalid("signal", "%d is outside [1, 64]", n)
	}
	return n, nil
}
