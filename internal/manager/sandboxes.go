// This file implements the record operations: get, list, update and delete.

package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// Get returns the record of sandbox id.
func (m *Manager) Get(ctx context.Context, id sandbox.ID) (sandbox.Sandbox, error) {
	const op = "get"
	if err := checkID(op, id); err != nil {
		return sandbox.Sandbox{}, err
	}
	sb, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) || sb.State == sandbox.StateWarm || (err == nil && !owns(ctx, sb.OwnerKey)) {
		return sandbox.Sandbox{}, notFound(op, id)
	}
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	return sb, nil
}

// List returns the sandboxes whose labels include every pair in labels.
func (m *Manager) List(ctx context.Context, labels map[string]string) ([]sandbox.Sandbox, error) {
	all, err := m.store.ListSandboxes(ctx)
	if err != nil {
		return nil, &sandbox.Error{Op: "list", Err: err}
	}
	out := all[:0]
	for _, sb := range all {
		if sb.State != sandbox.StateWarm && owns(ctx, sb.OwnerKey) && hasLabels(sb.Spec.Labels, labels) {
			out = append(out, sb)
		}
	}
	return out, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Update changes what may change on a live sandbox.
type Update struct {
	// Timeout, when set, makes the sandbox expire this long from now.
	Timeout *time.Duration
	// Labels, when set, replace the labels.
	Labels map[string]string
}

// Update applies u to running sandbox id and returns the new record.
func (m *Manager) Update(ctx context.Context, id sandbox.ID, u Update) (_ sandbox.Sandbox, retErr error) {
	const op = "update"
	defer func() {
		var what []string
		if u.Timeout != nil {
			what = append(what, fmt.Sprintf("timeout=%ds", int64(*u.Timeout/time.Second)))
		}
		if u.Labels != nil {
			what = append(what, "labels")
		}
		m.audit(ctx, id, op, "", strings.Join(what, " "), retErr)
	}()
	if err := checkID(op, id); err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := m.authorize(ctx, op, id); err != nil {
		return sandbox.Sandbox{}, err
	}
	var errs []error
	if u.Timeout != nil && (*u.Timeout < time.Second || *u.Timeout > m.policy.MaxTTL) {
		errs = append(errs, sandbox.Invalid("timeout", "%d s is outside [1, %d] s",
			int64(*u.Timeout/time.Second), int64(m.policy.MaxTTL/time.Second)))
	}
	if u.Labels != nil {
		// The label rules are Admit's; the other fields take their defaults.
		if _, err := m.policy.Admit(sandbox.CreateRequest{Labels: u.Labels}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	var deadline time.Time
	if u.Timeout != nil {
		deadline = m.now().Add(*u.Timeout)
	}
	sb, err := m.store.UpdateSandbox(ctx, id, func(r *sandbox.Sandbox) error {
		if r.State != sandbox.StateRunning {
			return wrongState(r.State)
		}
		if u.Timeout != nil {
			r.ExpiresAt = deadline
		}
		if u.Labels != nil {
			r.Spec.Labels = maps.Clone(u.Labels)
		}
		return nil
	})
	if errors.Is(err, sandbox.ErrNotFound) {
		return sandbox.Sandbox{}, notFound(op, id)
	}
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	if u.Timeout != nil {
		m.mu.Lock()
		if l := m.live[id]; l != nil {
			l.due = m.elapsed() + *u.Timeout
		}
		m.mu.Unlock()
		m.nudge()
	}
	return sb, nil
}

func wrongState(st sandbox.State) error {
	return fmt.Errorf("%w: sandbox is %s", sandbox.ErrWrongState, st)
}

// Delete destroys the sandbox. A second call returns ErrNotFound.
func (m *Manager) Delete(ctx context.Context, id sandbox.ID) error {
	if err := checkID("delete", id); err != nil {
		return err
	}
	if err := m.authorize(ctx, "delete", id); err != nil {
		return err
	}
	return m.destroy(ctx, "delete", id, "")
}

// destroy tears sandbox id down: intent (state deleting), Destroy, then the
// record. When Destroy fails the record stays, in state error, and the next
// daemon start retries it. why, when set, is logged as the reason. The call is
// audited under ctx's key, else (an expiry) under the sandbox's owner; once the
// record is gone the owner's place under its limits is free.
func (m *Manager) destroy(ctx context.Context, op string, id sandbox.ID, why string) (retErr error) {
	var owner string
	defer func() {
		key := keyID(ctx)
		if key == "" {
			key = owner
		}
		m.auditor.record(key, id, op, "", why, retErr)
	}()
	if err := checkID(op, id); err != nil {
		return err
	}
	m.mu.Lock()
	switch {
	case m.deleting[id]:
		m.mu.Unlock()
		return notFound(op, id) // it is on its way out
	case m.creating[id]:
		m.mu.Unlock()
		return &sandbox.Error{Op: op, ID: id, Err: &RetryError{
			Err: fmt.Errorf("%w: sandbox is being created; retry once it is running", sandbox.ErrWrongState), After: time.Second}}
	}
	m.deleting[id] = true
	l := m.live[id]
	delete(m.live, id)
	m.watchers.remove(id) // from here on the agent's end is this delete's, not a loss
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.deleting, id)
		m.mu.Unlock()
	}()
	if l != nil {
		l.client.Close()
	}

	cctx, cancel := cleanupContext(ctx) // a dropped request must not leave half a teardown
	defer cancel()
	began := time.Now()
	backendName, owner, err := m.store.SetSandboxState(cctx, id, sandbox.StateDeleting)
	if errors.Is(err, sandbox.ErrNotFound) {
		return notFound(op, id)
	}
	if err != nil {
		return &sandbox.Error{Op: op, ID: id, Err: err}
	}
	log := m.log.With(logkey.SandboxID, id, logkey.Backend, backendName)
	d := m.driver(backendName)
	if d == nil {
		// Its host resources cannot be reached from this configuration; the record
		// goes (every state can be deleted), and the operator is told.
		log.WarnContext(cctx, "deleting a sandbox whose backend is not configured; its host resources may remain")
	} else if err := d.Destroy(cctx, id); err != nil {
		// Quarantined: kept, shown, retried (quarantine.go), its resources
		// (uid range among them) never handed to another sandbox.
		log.ErrorContext(cctx, "destroying sandbox failed; quarantined, to be retried", logkey.Err, err)
		m.store.UpdateSandbox(cctx, id, func(r *sandbox.Sandbox) error {
			r.State = sandbox.StateQuarantined
			r.Error = "teardown failed: " + err.Error()
			return nil
		})
		m.auditor.record(owner, id, "quarantine", "", err.Error(), nil)
		return &sandbox.Error{Op: op, ID: id, Err: &RetryError{
			Err: fmt.Errorf("%w: destroying sandbox: %v; it is quarantined and its teardown is retried", sandbox.ErrUnavailable, err), After: quarantineRetry}}
	}
	m.forgetRules(id)
	m.forgetSecrets(id)
	m.gone(id)
	err = m.store.DeleteSandbox(cctx, id)
	if err == nil || errors.Is(err, sandbox.ErrNotFound) {
		m.limits.release(id) // the record is gone, and with it the owner's place
	}
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return notFound(op, id)
		}
		return &sandbox.Error{Op: op, ID: id, Err: err}
	}
	attrs := []any{logkey.Duration, time.Since(began), logkey.Op, op}
	if why != "" {
		attrs = append(attrs, "reason", why)
	}
	log.InfoContext(cctx, "sandbox destroyed", attrs...)
	return nil
}

// Stats returns the resource use of running sandbox id, for ctx's key; a
// backend that cannot read it is errors.ErrUnsupported.
func (m *Manager) Stats(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
	const op = "stats"
	if _, err := m.client(ctx, op, id); err != nil { // shape, owner, running
		return backend.Stats{}, err
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l == nil {
		return backend.Stats{}, notFound(op, id)
	}
	st, ok := m.driver(l.backend).(backend.Statser)
	if !ok {
		return backend.Stats{}, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("%w: backend %s cannot read a sandbox's resource use", errors.ErrUnsupported, l.backend)}
	}
	s, err := st.Stats(ctx, id)
	return s, sandbox.Wrap(op, id, err)
}

// OnGone registers fn, called with the id of each sandbox once its host
// resources are gone (deleted, expired): for the layers above the manager
// to drop what they keep per sandbox. fn must not block.
func (m *Manager) OnGone(fn func(sandbox.ID)) {
	m.goneMu.Lock()
	m.goneFns = append(m.goneFns, fn)
	m.goneMu.Unlock()
}

func (m *Manager) gone(id sandbox.ID) {
	m.goneMu.Lock()
	fns := m.goneFns
	m.goneMu.Unlock()
	for _, fn := range fns {
		fn(id)
	}
}
