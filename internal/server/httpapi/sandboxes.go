// This file implements the sandbox routes: create, list, get, update, delete,
// and the public health and OpenAPI routes.

package httpapi

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// maxSeconds bounds any duration in seconds on the wire, far beyond every
// policy ceiling, so converting it to a time.Duration cannot overflow.
const maxSeconds = 100 * 365 * 24 * 3600

// seconds converts an optional positive number of seconds; 0, negatives and
// absurd values are refused naming field.
func seconds(field string, v *int64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, sandbox.Invalid(field, "%d s is below 1 s (omit it for the default)", *v)
	}
	if *v > maxSeconds {
		return 0, sandbox.Invalid(field, "%d s is too large", *v)
	}
	return time.Duration(*v) * time.Second, nil
}

// megabytes converts an optional positive size in MiB to bytes.
func megabytes(field string, v *int64) (int64, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, sandbox.Invalid(field, "%d MB is below 1 MB (omit it for the default)", *v)
	}
	if *v > math.MaxInt64/sandbox.MiB {
		return 0, sandbox.Invalid(field, "%d MB is too large", *v)
	}
	return *v * sandbox.MiB, nil
}

func createRequest(in openapi.CreateSandboxRequest) (sandbox.CreateRequest, error) {
	var errs []error
	req := sandbox.CreateRequest{
		Template: in.Template,
		Labels:   in.Labels,
		Env:      in.Env,
		Secrets:  in.Secrets,
	}
	if n := in.Network; n != nil {
		if n.Mode == "" {
			errs = append(errs, sandbox.Invalid("network.mode", "missing (want none, allowlist or full)"))
		}
		req.Network, req.NetworkAllow, req.NetworkBlock = sandbox.Network(n.Mode), n.Allow, n.Block
	}
	var err error
	if req.Timeout, err = seconds("timeout", in.Timeout); err != nil {
		errs = append(errs, err)
	}
	if req.MemoryBytes, err = megabytes("memory_mb", in.MemoryMB); err != nil {
		errs = append(errs, err)
	}
	if req.DiskBytes, err = megabytes("disk_mb", in.DiskMB); err != nil {
		errs = append(errs, err)
	}
	if in.Pids != nil {
		if *in.Pids < 1 {
			errs = append(errs, sandbox.Invalid("pids", "%d is below 1 (omit it for the default)", *in.Pids))
		} else {
			req.Pids = *in.Pids
		}
	}
	if in.CPUs != nil {
		c := *in.CPUs
		switch {
		case !(c > 0):
			errs = append(errs, sandbox.Invalid("cpus", "%g is not positive (omit it for the default)", c))
		case c > 1e6:
			errs = append(errs, sandbox.Invalid("cpus", "%g is too large", c))
		default:
			req.MilliCPUs = max(1, int64(math.Round(c*1000)))
		}
	}
	return req, errors.Join(errs...)
}

func (s *server) create(w http.ResponseWriter, r *http.Request) error {
	var in openapi.CreateSandboxRequest
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	req, err := createRequest(in)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	var sb sandbox.Sandbox
	if vs := r.Header.Values(openapi.IdempotencyKeyHeader); len(vs) > 0 {
		if len(vs) > 1 {
			return sandbox.Invalid(openapi.IdempotencyKeyHeader, "given %d times", len(vs))
		}
		var replayed bool
		sb, replayed, err = s.m.CreateIdempotent(r.Context(), req, vs[0])
		if replayed {
			status = http.StatusOK // the sandbox an earlier call created
		}
	} else {
		sb, err = s.m.Create(r.Context(), req)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sandboxes/"+string(sb.ID))
	return writeJSON(w, status, wireSandbox(sb))
}

func (s *server) list(w http.ResponseWriter, r *http.Request) error {
	var labels map[string]string
	for _, kv := range r.URL.Query()["label"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return sandbox.Invalid("label", "%q is not key=value", truncate(kv, 80))
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = v
	}
	sbs, err := s.m.List(r.Context(), labels)
	if err != nil {
		return err
	}
	out := openapi.SandboxList{Sandboxes: make([]openapi.Sandbox, 0, len(sbs))}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, wireSandbox(sb))
	}
	if err := s.publicPorts(r.Context(), out.Sandboxes, true /* all */); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *server) get(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.m.Get(r.Context(), sandboxID(r))
	if err != nil {
		return err
	}
	out := []openapi.Sandbox{wireSandbox(sb)}
	if err := s.publicPorts(r.Context(), out, false); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out[0])
}

func (s *server) update(w http.ResponseWriter, r *http.Request) error {
	var in openapi.UpdateSandboxRequest
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	var u manager.Update
	if in.Timeout != nil {
		d, err := seconds("timeout", in.Timeout)
		if err != nil {
			return err
		}
		u.Timeout = &d
	}
	u.Labels = in.Labels
	sb, err := s.m.Update(r.Context(), sandboxID(r), u)
	if err != nil {
		return err
	}
	out := []openapi.Sandbox{wireSandbox(sb)}
	if err := s.publicPorts(r.Context(), out, false); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out[0])
}

func (s *server) delete(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.Delete(r.Context(), sandboxID(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sandboxID is the {id} of the route. The manager checks its shape, and reports a
// malformed one as not found.
func sandboxID(r *http.Request) sandbox.ID { return sandbox.ID(r.PathValue("id")) }

func (s *server) health(w http.ResponseWriter, r *http.Request) error {
	hs := s.m.Health(r.Context())
	out := openapi.Health{Status: "degraded", Backends: make([]openapi.BackendHealth, 0, len(hs))}
	for _, h := range hs {
		layers := make(map[string]string, len(h.Layers))
		for k, v := range h.Layers {
			layers[k] = string(v)
		}
		reasons := h.Reasons
		if reasons == nil {
			reasons = []string{}
		}
		if h.Primary {
			out.Status = "ok"
		}
		out.Backends = append(out.Backends, openapi.BackendHealth{Name: h.Name, Available: h.Available,
			Primary: h.Primary, Level: h.Level, Sandbox: h.Sandbox, Layers: layers, LayerReasons: h.LayerReasons, Reasons: reasons, Templates: h.Templates})
	}
	if p := s.m.Pool(); p.Size > 0 {
		out.Pool = &openapi.PoolHealth{Size: p.Size, Ready: p.Ready}
	}
	for _, id := range s.m.Quarantined(r.Context()) {
		out.Quarantined = append(out.Quarantined, string(id))
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusOK, out)
}

func (s *server) openAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(openapi.Document)
	return err
}
