// This file implements the secret routes: a key sets, lists, reads and
// deletes its own secrets. A value goes in and never comes back out: every
// answer is metadata.

package httpapi

import (
	"net/http"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/manager"
)

func wireSecret(s manager.SecretInfo) openapi.SecretInfo {
	hosts := s.Hosts
	if hosts == nil {
		hosts = []string{}
	}
	return openapi.SecretInfo{Name: s.Name, Mode: s.Mode, Hosts: hosts, CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC()}
}

// setSecret creates a secret (201) or replaces the key's secret of that
// name (200).
func (s *server) setSecret(w http.ResponseWriter, r *http.Request) error {
	var in openapi.SecretCreate
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	info, replaced, err := s.m.SetSecret(r.Context(), in.Name, []byte(in.Value), in.Mode, in.Hosts)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if replaced {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/secrets/"+info.Name)
	return writeJSON(w, status, wireSecret(info))
}

func (s *server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	infos, err := s.m.Secrets(r.Context())
	if err != nil {
		return err
	}
	out := openapi.SecretList{Secrets: make([]openapi.SecretInfo, 0, len(infos))}
	for _, i := range infos {
		out.Secrets = append(out.Secrets, wireSecret(i))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *server) getSecret(w http.ResponseWriter, r *http.Request) error {
	info, err := s.m.Secret(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wireSecret(info))
}

func (s *server) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.DeleteSecret(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
