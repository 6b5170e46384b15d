// This file implements GET /v1/audit: the audit log, newest first. The admin key
// reads every key's records; any other key reads only its own.

package httpapi

import (
	"net/http"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

func (s *server) audit(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	aq := manager.AuditQuery{
		SandboxID: q.str("sandbox_id", false),
		KeyID:     q.str("key_id", false),
		Limit:     int(q.int("limit", 100, 1, manager.MaxAuditLimit)),
	}
	since := q.str("since", false)
	if q.err != nil {
		return q.err
	}
	if since != "" {
		t, err := time.Parse(time.RFC3339Nano, since)
		if err != nil {
			return sandbox.Invalid("since", "%q is not an RFC 3339 time like 2025-01-02T15:04:05Z", truncate(since, 40))
		}
		aq.Since = t
	}
	recs, err := s.m.Audit(r.Context(), aq)
	if err != nil {
		return err
	}
	out := openapi.AuditList{Records: make([]openapi.AuditRecord, 0, len(recs))}
	for _, rec := range recs {
		out.Records = append(out.Records, openapi.AuditRecord{ID: rec.ID, Time: rec.At.UTC(), KeyID: rec.KeyID,
			SandboxID: rec.SandboxID, Action: rec.Action, Target: rec.Target, Outcome: rec.Outcome, Detail: rec.Detail})
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusOK, out)
}
