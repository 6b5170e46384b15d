// This file serves a sandbox's network tier: changing it, and the egress
// decisions made about its traffic.

package httpapi

import (
	"net/http"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

func (s *server) setNetwork(w http.ResponseWriter, r *http.Request) error {
	var in openapi.NetworkPolicy
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	sb, err := s.m.SetNetwork(r.Context(), sandboxID(r), sandbox.Network(in.Mode), in.Allow, in.Block)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wireSandbox(sb))
}

func (s *server) networkEvents(w http.ResponseWriter, r *http.Request) error {
	events, allowed, refused, err := s.m.NetworkEvents(r.Context(), sandboxID(r))
	if err != nil {
		return err
	}
	out := openapi.NetworkEvents{Allowed: allowed, Refused: refused, Events: make([]openapi.NetworkEvent, 0, len(events))}
	for _, e := range events {
		out.Events = append(out.Events, openapi.NetworkEvent{Time: e.Time.UTC(), Destination: e.Dst, Protocol: e.Proto, Rule: e.Rule, Allowed: e.Allowed})
	}
	return writeJSON(w, http.StatusOK, out)
}
