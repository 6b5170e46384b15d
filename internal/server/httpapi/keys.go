// This file implements key management: the admin key makes API keys, each
// holding a set of capabilities (which tool families it may call), lists
// them and revokes them.

package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tools"
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

// routeCapability is the capability each route that acts inside a sandbox
// needs, the same as the tools that do the same (SECURITY.md AP-04): a key
// without sandbox.exec runs no command by any route, one without tools.files
// touches no file. Routes not named here need none (sandboxes' own life,
// the daemon's health); the tool routes check their tool's.
var routeCapability = map[string]string{
	"exec": tools.CapExec, "list_processes": tools.CapExec, "get_process": tools.CapExec, "attach": tools.CapExec,
	"wait_process": tools.CapExec, "write_stdin": tools.CapExec, "signal": tools.CapExec, ptyOp: tools.CapExec,
	"read_file": tools.CapFiles, "write_file": tools.CapFiles, "stat": tools.CapFiles, "list_dir": tools.CapFiles,
	"make_dir": tools.CapFiles, "move": tools.CapFiles, "remove": tools.CapFiles, "glob": tools.CapFiles,
	"grep": tools.CapFiles, "download": tools.CapFiles, "upload": tools.CapFiles,
	"download_archive": tools.CapFiles, "upload_archive": tools.CapFiles,
}

// allowed refuses op to a key without its capability, in the words of seed
// 001: "access denied: <capability>".
func allowed(k manager.Key, op string) error {
	if c := routeCapability[op]; c != "" && !k.Can(c) {
		return fmt.Errorf("%w: %s", sandbox.ErrDenied, c)
	}
	return nil
}
