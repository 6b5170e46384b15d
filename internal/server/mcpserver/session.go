// This file implements the session sandbox: one per MCP session, created by
// the session's first call that names no sandbox, reused by its later calls,
// and deleted when the session ends (the client's DELETE, the idle timeout,
// the daemon's shutdown).

package mcpserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// SessionLabel is the label of a session sandbox; its value is the MCP
// session id, so GET /v1/sandboxes?label=sbx.mcp.session=<id> finds it.
const SessionLabel = "sbx.mcp.session"

// deleteTimeout bounds the deletion of a session's sandbox once it ended.
const deleteTimeout = time.Minute

var (
	errShutdown = fmt.Errorf("%w: the daemon is shutting down", sandbox.ErrUnavailable)
	errEnded    = fmt.Errorf("%w: the MCP session has ended", sandbox.ErrWrongState)
)

// session is one MCP session that asked for its sandbox.
type session struct {
	ss    *mcp.ServerSession
	label string
	// mu is held while the sandbox is looked up or created, so concurrent
	// first calls of the session make one sandbox, and its end waits for a
	// create in flight before deleting what it made.
	mu    lockChan
	key   manager.Key // the key that created id: the session's, by the SDK's binding
	id    sandbox.ID
	ended bool
}

// lockChan is a mutex whose Lock gives up with a context: a call must not
// wait past its own cancellation for another call's create.
type lockChan chan struct{}

func (l lockChan) lock(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (l lockChan) unlock() { <-l }

// sessionSandbox returns the sandbox of ss, creating it on first use or when
// the one it had is gone; note, when set, tells the model its files went
// with the old one. tool names the call in errors.
func (s *Server) sessionSandbox(ctx context.Context, ss *mcp.ServerSession, tool string) (id sandbox.ID, note string, err error) {
	se, err := s.session(ss)
	if err != nil {
		return "", "", &sandbox.Error{Op: tool, Err: err}
	}
	if err := se.mu.lock(ctx); err != nil {
		return "", "", &sandbox.Error{Op: tool, Err: err}
	}
	defer se.mu.unlock()
	if se.ended {
		return "", "", &sandbox.Error{Op: tool, Err: errEnded}
	}
	old := se.id
	if old != "" {
		gone, err := s.gone(ctx, old)
		if err != nil {
			return "", "", sandbox.Wrap(tool, old, err)
		}
		if !gone {
			return old, "", nil
		}
		se.id = ""
	}
	sb, err := s.m.Create(ctx, sandbox.CreateRequest{Labels: map[string]string{SessionLabel: se.label}})
	if err != nil {
		return "", "", &sandbox.Error{Op: tool, Err: fmt.Errorf("creating this session's sandbox: %w", err)}
	}
	se.id = sb.ID
	se.key, _ = manager.KeyFrom(ctx)
	s.log.InfoContext(ctx, "created an MCP session's sandbox", logkey.SandboxID, sb.ID, "session", se.label)
	if old != "" {
		note = fmt.Sprintf("[sbx: this session's sandbox %s is gone (its time limit passed, or it was deleted); "+
			"this call ran in a new, empty sandbox %s: files written before are not in it]\n", old, sb.ID)
	}
	return sb.ID, note, nil
}

// gone reports whether sandbox id can no longer run the session's calls: its
// TTL passed or it was deleted. One in another state than running (its agent
// lost, say) is deleted here, so it does not outlive its replacement.
func (s *Server) gone(ctx context.Context, id sandbox.ID) (bool, error) {
	sb, err := s.m.Get(ctx, id)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return true, nil
	case err != nil:
		return false, err
	case sb.State == sandbox.StateRunning:
		return false, nil
	}
	if err := s.m.Delete(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		s.log.WarnContext(ctx, "deleting a session sandbox that stopped running", logkey.SandboxID, id, logkey.Err, err)
	}
	return true, nil
}

// session returns the record of ss, making it (and the watcher that deletes
// its sandbox when ss ends) on first use.
func (s *Server) session(ss *mcp.ServerSession) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, errShutdown
	}
	if se := s.sessions[ss]; se != nil {
		return se, nil
	}
	se := &session{ss: ss, label: ss.ID(), mu: make(lockChan, 1)}
	if se.label == "" { // transports without session ids (stdio, in memory)
		se.label = rand.Text()
	}
	s.sessions[ss] = se
	s.watchers.Add(1)
	go s.watch(se)
	return se, nil
}

// watch deletes se's sandbox once its session ends.
func (s *Server) watch(se *session) {
	defer s.watchers.Done()
	se.ss.Wait()
	s.end(se)
}

// end forgets se and deletes its sandbox, after any create in flight.
func (s *Server) end(se *session) {
	se.mu.lock(context.Background())
	id, key := se.id, se.key
	se.id, se.ended = "", true
	se.mu.unlock()
	s.mu.Lock()
	delete(s.sessions, se.ss)
	s.mu.Unlock()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(manager.WithKey(context.Background(), key), deleteTimeout)
	defer cancel()
	err := s.m.Delete(ctx, id)
	switch {
	case err == nil:
		s.log.Info("deleted an ended MCP session's sandbox", logkey.SandboxID, id, "session", se.label)
	case errors.Is(err, sandbox.ErrNotFound): // its TTL passed first
	default:
		s.log.Warn("deleting an ended MCP session's sandbox", logkey.SandboxID, id, "session", se.label, logkey.Err, err)
	}
}

// Close ends every session and waits, within ctx, until their sandboxes are
// deleted; calls made after it get no new session sandbox. The daemon calls
// it before it closes the manager. It may be called more than once.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	for ss := range s.srv.Sessions() {
		ss.Close()
	}
	done := make(chan struct{})
	go func() {
		s.watchers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for MCP session sandboxes to be deleted: %w", context.Cause(ctx))
	}
}
