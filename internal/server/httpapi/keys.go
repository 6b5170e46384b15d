// This file implements key management: the admin key makes API keys, each
// holding a set of capabilities (which tool families it may call), lists
// them and revokes them.

package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"sbx/api/openapi"
	"sbx/internal/manager"
	"sbx/internal/sandbox"
	"sbx/internal/tools"
)

func keyInfo(k manager.KeyRecord) openapi.KeyInfo {
	out := openapi.KeyInfo{ID: k.ID, Name: k.Name, Capabilities: k.Capabilities, CreatedAt: k.CreatedAt.UTC().Format(time.RFC3339)}
	if out.Capabilities == nil {
		out.Capabilities = []string{manager.AllCapabilities}
	}
	if !k.RevokedAt.IsZero() {
		out.RevokedAt = k.RevokedAt.UTC().Format(time.RFC3339)
	}
	return out
}

func (s *server) createKey(w http.ResponseWriter, r *http.Request) error {
	var in openapi.KeyCreate
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	caps := in.Capabilities
	for _, c := range caps {
		if c != manager.AllCapabilities && !slices.Contains(tools.Capabilities, c) {
			return sandbox.Invalid("capabilities", "%q is not a capability (they are: %s, or %s for all)",
				truncate(c, 64), strings.Join(tools.Capabilities, ", "), manager.AllCapabilities)
		}
	}
	if caps == nil {
		caps = []string{manager.AllCapabilities}
	}
	secret, k, err := s.m.CreateKey(r.Context(), in.Name, caps)
	if err != nil {
		return err
	}
	out := keyInfo(k)
	out.Secret = secret
	return writeJSON(w, http.StatusCreated, out)
}

func (s *server) listKeys(w http.ResponseWriter, r *http.Request) error {
	ks, err := s.m.Keys(r.Context())
	if err != nil {
		return err
	}
	out := openapi.KeyList{Keys: []openapi.KeyInfo{}}
	for _, k := range ks {
		out.Keys = append(out.Keys, keyInfo(k))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.RevokeKey(r.Context(), r.PathValue("kid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
