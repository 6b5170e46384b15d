// This file implements the audit log (SECURITY.md AP-14): every create,
// delete, expiry, exec, process signal and stdin, and file call is recorded
// with its time, key, sandbox, action, target and outcome, never contents,
// environment values, stdin or secrets. A call only queues its record: one
// writer batches records into the store and the log (component=audit), so exec
// never waits for SQLite. When the bounded queue is full, records are dropped
// and counted, and the writer warns.

package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/store"
)

// AuditRecord is one audited call; AuditQuery selects records.
type (
	AuditRecord = store.AuditRecord
	AuditQuery  = store.AuditQuery
)

const (
	// auditQueue bounds the records waiting for the writer.
	auditQueue = 8192
	// auditBatch bounds the records written in one transaction.
	auditBatch = 512
	// auditLinger is how long the writer waits for more records after the
	// first of a batch.
	auditLinger = 50 * time.Millisecond
	// pruneInterval is how often old audit records and idempotency keys go.
	pruneInterval = 10 * time.Minute
	// auditFlushWait bounds how long a read of the log waits for records
	// queued before it.
	auditFlushWait = 2 * time.Second
	// Bounds of a record's fields, in bytes.
	maxAuditTarget = 1024
	maxAuditDetail = 256
	// MaxAuditLimit bounds the records one query returns.
	MaxAuditLimit = 1000
)

// auditItem is a record, or a flush marker closed once every record queued
// before it is written.
type auditItem struct {
	rec   store.AuditRecord
	flush chan struct{}
}

// auditor is the audit log: the bounded queue between calls and its one writer.
// It needs the store, the wall clock and, for the housekeeping that shares its
// writer's schedule, one function; each is passed in, not the Manager, so what
// the writer can reach is what this struct lists. The queue is a channel and the
// drop count an atomic: calls take no lock.
type auditor struct {
	store      *store.Store
	now        func() time.Time
	log        *slog.Logger
	retention  time.Duration // 0: no age bound
	maxRecords int           // 0: no count bound
	// pruneAlso runs with each prune of the log: the manager prunes its
	// idempotency keys there, so one loop does the daemon's housekeeping.
	pruneAlso func(context.Context)

	ch      chan auditItem
	dropped atomic.Int64  // since the writer last warned
	stop    chan struct{} // closed by close: drain and end
	loop    sync.WaitGroup
}

func newAuditor(st *store.Store, now func() time.Time, log *slog.Logger, retention time.Duration, maxRecords int, pruneAlso func(context.Context)) *auditor {
	return &auditor{store: st, now: now, log: log, retention: retention, maxRecords: maxRecords, pruneAlso: pruneAlso,
		ch: make(chan auditItem, auditQueue), stop: make(chan struct{})}
}

// auditOutcomes maps error classes to the code names the API uses, in the
// API's order (httpapi's test checks the two agree).
var auditOutcomes = []struct {
	err  error
	code string
}{
	{sandbox.ErrUnauthenticated, "unauthenticated"},
	{sandbox.ErrNotFound, "not_found"},
	{sandbox.ErrInvalid, "invalid_argument"},
	{sandbox.ErrTooLarge, "out_of_range"},
	{sandbox.ErrDenied, "permission_denied"},
	{sandbox.ErrExists, "already_exists"},
	{sandbox.ErrWrongState, "failed_precondition"},
	{sandbox.ErrLimit, "resource_exhausted"},
	{sandbox.ErrIsolation, "isolation_unavailable"},
	{sandbox.ErrUnavailable, "unavailable"},
	{sandbox.ErrTimeout, "deadline_exceeded"},
	{context.DeadlineExceeded, "deadline_exceeded"},
	{sandbox.ErrAgentLost, "agent_lost"},
	{sandbox.ErrNoSpace, "insufficient_storage"},
	{errors.ErrUnsupported, "unimplemented"},
	{context.Canceled, "canceled"},
}

// AuditOutcome is the outcome an audit record gives err: "ok" for nil, else the
// code name of its class ("internal" when it has none).
func AuditOutcome(err error) string {
	if err == nil {
		return "ok"
	}
	for _, o := range auditOutcomes {
		if errors.Is(err, o.err) {
			return o.code
		}
	}
	return "internal"
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// audit queues the record of a call by ctx's key on sandbox id (see record).
func (m *Manager) audit(ctx context.Context, id sandbox.ID, action, target, detail string, err error) {
	m.auditor.record(keyID(ctx), id, action, target, detail, err)
}

// record queues the record of a call by key keyID on sandbox id. It never
// blocks: with the queue full, the record is dropped and counted.
func (a *auditor) record(keyID string, id sandbox.ID, action, target, detail string, err error) {
	rec := store.AuditRecord{
		At:        a.now(),
		KeyID:     keyID,
		SandboxID: clip(string(id), 64),
		Action:    action,
		Target:    clip(target, maxAuditTarget),
		Outcome:   AuditOutcome(err),
		Detail:    clip(detail, maxAuditDetail),
	}
	select {
	case a.ch <- auditItem{rec: rec}:
	default:
		a.dropped.Add(1)
	}
}

// start starts the writer; close stops it after the last record. ctx gives
// the writer's calls their values only: records queued before close are
// written even once ctx is cancelled.
func (a *auditor) start(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	a.loop.Go(func() { a.write(ctx) })
}

// close drains the queue into the store and waits for the writer to end. Call
// it once, after the last component that records has stopped.
func (a *auditor) close() {
	close(a.stop)
	a.loop.Wait()
}

// write is the writer: it batches queued records into the store and the log,
// and prunes every pruneInterval.
func (a *auditor) write(ctx context.Context) {
	a.prune(ctx)
	tick := time.NewTicker(pruneInterval)
	defer tick.Stop()
	batch := make([]store.AuditRecord, 0, auditBatch)
	var flushes []chan struct{}
	add := func(it auditItem) {
		if it.flush != nil {
			flushes = append(flushes, it.flush)
		} else {
			batch = append(batch, it.rec)
		}
	}
	write := func() {
		a.append(ctx, batch)
		for _, f := range flushes {
			close(f)
		}
		batch, flushes = batch[:0], flushes[:0]
		if n := a.dropped.Swap(0); n > 0 {
			a.log.WarnContext(ctx, "audit records dropped: the queue was full", "dropped", n, "queue", auditQueue)
		}
	}
	for {
		select {
		case it := <-a.ch:
			add(it)
			// Linger for more: one transaction per burst, not per call, so
			// the store's single writer is rarely taken from a create's
			// commit. A flush (a reader of the log waits) writes at once.
			linger := time.NewTimer(auditLinger)
		collect:
			for len(batch) < auditBatch && len(flushes) == 0 {
				select {
				case it := <-a.ch:
					add(it)
				case <-linger.C:
					break collect
				case <-a.stop:
					break collect // the next round drains the rest
				}
			}
			linger.Stop()
			write()
		case <-tick.C:
			a.prune(ctx)
		case <-a.stop:
			for len(a.ch) > 0 { // this goroutine alone receives: no wait
				add(<-a.ch)
				if len(batch) >= auditBatch {
					write()
				}
			}
			write()
			return
		}
	}
}

// append writes recs to the store, then to the log.
func (a *auditor) append(ctx context.Context, recs []store.AuditRecord) {
	if len(recs) == 0 {
		return
	}
	if err := a.store.AppendAudit(ctx, recs); err != nil {
		a.log.ErrorContext(ctx, "writing audit records failed; they are in this log only", "records", len(recs), logkey.Err, err)
	}
	for _, r := range recs {
		attrs := []slog.Attr{slog.String("action", r.Action), slog.String(logkey.KeyID, r.KeyID),
			slog.String(logkey.SandboxID, r.SandboxID), slog.String("target", r.Target), slog.String("outcome", r.Outcome)}
		if r.Detail != "" {
			attrs = append(attrs, slog.String("detail", r.Detail))
		}
		a.log.LogAttrs(ctx, slog.LevelInfo, "audit", attrs...)
	}
}

// flush waits, boundedly, until the records queued before it are written.
func (a *auditor) flush(ctx context.Context) {
	done := make(chan struct{})
	t := time.NewTimer(auditFlushWait)
	defer t.Stop()
	select {
	case a.ch <- auditItem{flush: done}:
	case <-ctx.Done():
		return
	case <-t.C:
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
}

// prune deletes the records beyond the retention and the count bound, then
// runs pruneAlso.
func (a *auditor) prune(ctx context.Context) {
	var before time.Time
	if a.retention > 0 {
		before = a.now().Add(-a.retention)
	}
	if !before.IsZero() || a.maxRecords > 0 {
		n, err := a.store.PruneAudit(ctx, before, a.maxRecords)
		if err != nil {
			a.log.WarnContext(ctx, "pruning the audit log", logkey.Err, err)
		} else if n > 0 {
			a.log.DebugContext(ctx, "pruned the audit log", "records", n)
		}
	}
	a.pruneAlso(ctx)
}

// Audit returns the audit records q selects, newest first. The admin key reads
// every key's records; any other key reads only its own (naming another key is
// ErrDenied). Records queued before the call are included.
func (m *Manager) Audit(ctx context.Context, q AuditQuery) ([]AuditRecord, error) {
	const op = "audit"
	k, ok := KeyFrom(ctx)
	if !ok || k.ID == "" {
		return nil, &sandbox.Error{Op: op, Err: fmt.Errorf("%w: reading the audit log needs an API key", sandbox.ErrDenied)}
	}
	if !k.Admin {
		if q.KeyID != "" && q.KeyID != k.ID {
			return nil, &sandbox.Error{Op: op, Err: fmt.Errorf("%w: key %s reads only its own audit records; only the admin key reads those of key %s",
				sandbox.ErrDenied, k.ID, clip(q.KeyID, 64))}
		}
		q.KeyID = k.ID
	}
	switch {
	case q.Limit <= 0:
		q.Limit = 100
	case q.Limit > MaxAuditLimit:
		q.Limit = MaxAuditLimit
	}
	m.auditor.flush(ctx)
	recs, err := m.store.ListAudit(ctx, q)
	if err != nil {
		return nil, &sandbox.Error{Op: op, Err: err}
	}
	return recs, nil
}
