// This file implements `sbx exec -t`: the command runs in a terminal in the
// sandbox, driven from this one over the daemon's WebSocket terminal route.

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/client"
)

// eot is ^D: sent when a piped stdin ends, so that a program reading its
// terminal to the end (cat, wc, a shell) sees the end there too.
const eot = 0x04

// ptyRequest is the terminal request of `sbx exec -t` for req's command.
func ptyRequest(req openapi.ExecRequest) client.PtyRequest {
	return client.PtyRequest{Argv: req.Argv, Cwd: req.Cwd, Env: req.Env, Timeout: req.Timeout}
}

// localTerm is the local end of a terminal: stdin in raw mode when it is a
// terminal, left alone when it is not (a pipe, a file: scripts and tests).
type localTerm struct {
	in       io.Reader
	fd       int // stdin's descriptor when it is a terminal, else -1
	outFd    int // stdout's descriptor when it is a terminal, else -1
	restored func()
}

func newLocalTerm(stdin io.Reader, stdout io.Writer) *localTerm {
	lt := &localTerm{in: stdin, fd: -1, outFd: -1, restored: func() {}}
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		lt.fd = int(f.Fd())
	}
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		lt.outFd = int(f.Fd())
	}
	return lt
}

func (lt *localTerm) interactive() bool { return lt.fd >= 0 }

// size is the local terminal's size; 0, 0 when there is none.
func (lt *localTerm) size() (rows, cols int) {
	for _, fd := range []int{lt.outFd, lt.fd} {
		if fd < 0 {
			continue
		}
		if c, r, err := term.GetSize(fd); err == nil && r > 0 && c > 0 {
			return min(r, openapi.PtyMaxSize), min(c, openapi.PtyMaxSize)
		}
	}
	return 0, 0
}

// raw puts the local terminal in raw mode: every key, ^C included, goes to
// the remote program. restore undoes it; it is safe to call more than once.
func (lt *localTerm) raw() error {
	if !lt.interactive() {
		return nil
	}
	st, err := term.MakeRaw(lt.fd)
	if err != nil {
		return fmt.Errorf("putting the terminal in raw mode: %w", err)
	}
	done := false
	lt.restored = func() {
		if !done {
			done = true
			term.Restore(lt.fd, st)
		}
	}
	return nil
}

func (lt *localTerm) restore() { lt.restored() }

// execTTY runs req in a terminal in sandbox id and returns the exit code for
// it, by the rules of execStream: the command's own, 124 on its timeout,
// 128+n when signal n ended it, 130 when sbx was interrupted.
func execTTY(ctx context.Context, e *env, c *client.Client, id string, req client.PtyRequest) int {
	const name = "exec"
	signal.Ignore(syscall.SIGPIPE) // a closed stdout is an error to return from, the terminal restored
	lt := newLocalTerm(e.stdin, e.stdout)
	req.Rows, req.Cols = lt.size()
	t, err := c.OpenTerminal(ctx, id, req)
	if err != nil {
		return e.fail(name, false, execErrorCode(err), err)
	}
	defer t.Close() // the daemon kills the terminal's process then
	if err := lt.raw(); err != nil {
		return e.fail(name, false, exitSbx, err)
	}
	defer lt.restore()
	stopResize := followResize(ctx, lt, t)
	defer stopResize()
	go sendInput(lt, t)

	res, err := t.Output(ctx, e.stdout, func(err error) {
		fmt.Fprintf(e.stderr, "\r\nsbx %s: %v\r\n", name, err)
	})
	lt.restore() // before any message: the local terminal must read as usual again
	switch {
	case err == nil:
		return client.ExitCode(res)
	case ctx.Err() != nil:
		fmt.Fprintf(e.stderr, "sbx %s: interrupted; the terminal was closed and its command killed\n", name)
		return 130
	case errors.Is(err, syscall.EPIPE):
		return 128 + int(syscall.SIGPIPE)
	}
	return e.fail(name, false, exitSbx, err)
}

// sendInput copies stdin to the terminal until stdin ends; a piped stdin's
// end is passed on as ^D. A read of stdin cannot be interrupted, so this
// goroutine is not waited for: it ends with the process.
func sendInput(lt *localTerm, t *client.Terminal) {
	buf := make([]byte, 32<<10)
	for {
		n, err := lt.in.Read(buf)
		if n > 0 {
			if _, werr := t.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !lt.interactive() {
				t.Write([]byte{eot})
			}
			return
		}
	}
}

// followResize passes the local terminal's size changes (SIGWINCH) on to
// the remote one until stopped. Changes that come faster than they are sent
// are merged: only the latest size matters.
func followResize(ctx context.Context, lt *localTerm, t *client.Terminal) (stop func()) {
	if !lt.interactive() {
		return func() {}
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
			}
			if rows, cols := lt.size(); rows > 0 {
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				t.Resize(rctx, rows, cols)
				rcancel()
			}
		}
	}()
	return func() {
		signal.Stop(winch)
		cancel()
	}
}
