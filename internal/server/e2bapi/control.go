// This file serves E2B's control plane: create, get, list, kill, timeouts,
// connect, metrics and logs, mapped onto the manager's sandboxes. A sandbox
// E2B's SDK sees is an sbx sandbox: its metadata are the sandbox's labels,
// its envVars the sandbox's environment, its timeout the sandbox's TTL.

package e2bapi

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// templateLabel keeps the template name E2B's client asked for ("base",
// "code-interpreter-v1", …) where it is not an sbx template name itself.
// It is hidden from the metadata E2B's API returns.
const templateLabel = "e2b.template"

// defaultTimeout is E2B's sandbox timeout when create names none, and the
// extension connect gives when it names none.
const defaultTimeout = 300 * time.Second

// e2bTemplates are E2B's own template names, each served by sbx's default
// template (whose tools include the persistent Python the code
// interpreter needs).
var e2bTemplates = []string{"base", "code-interpreter-v1", "code-interpreter-beta", "desktop"}

// route is one route of the control plane.
type route struct {
	pattern string
	fn      func(*Handler, http.ResponseWriter, *http.Request) error
}

// controlRoutes is the control plane's routing table.
var controlRoutes = []route{
	{"POST /v2/sandboxes", (*Handler).create},
	{"POST /sandboxes", (*Handler).create},
	{"GET /v2/sandboxes", (*Handler).listV2},
	{"GET /sandboxes", (*Handler).listV1},
	{"GET /sandboxes/{id}", (*Handler).get},
	{"DELETE /sandboxes/{id}", (*Handler).kill},
	{"POST /sandboxes/{id}/timeout", (*Handler).setTimeout},
	{"POST /sandboxes/{id}/refreshes", (*Handler).refresh},
	{"POST /v2/sandboxes/{id}/connect", (*Handler).connect},
	{"POST /sandboxes/{id}/resume", (*Handler).resume},
	{"POST /sandboxes/{id}/pause", (*Handler).pause},
	{"GET /sandboxes/{id}/metrics", (*Handler).metrics},
	{"GET /sandboxes/{id}/logs", (*Handler).logsV1},
	{"GET /v2/sandboxes/{id}/logs", (*Handler).logsV2},
}

// Patterns lists the control plane's routes ("METHOD /path"), for tests
// that walk them.
func Patterns() []string {
	out := make([]string, 0, len(controlRoutes))
	for _, rt := range controlRoutes {
		out = append(out, rt.pattern)
	}
	return out
}

func (h *Handler) routes() {
	for _, rt := range controlRoutes {
		h.mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := rt.fn(h, w, r); err != nil {
				h.writeError(w, r, err)
			}
		})
	}
}

// serveControl authenticates r and routes it.
func (h *Handler) serveControl(w http.ResponseWriter, r *http.Request) {
	r, err := h.authenticate(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if _, pattern := h.mux.Handler(r); pattern == "" {
		// 501, not 404: the SDK reads a 404 as "sandbox not found".
		h.writeError(w, r, fmt.Errorf("%w: %s %s is not part of the E2B API sbx serves (see the README's table of supported calls)",
			errors.ErrUnsupported, r.Method, truncate(r.URL.Path, 200)))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// sandboxJSON is E2B's Sandbox (create and connect).
type sandboxJSON struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string  `json:"trafficAccessToken,omitempty"`
	Domain             *string `json:"domain"`
}

// detailJSON is E2B's SandboxDetail (get) and, without the detail-only
// fields, ListedSandbox (list).
type detailJSON struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	ClientID    string            `json:"clientID"`
	Metadata    map[string]string `json:"metadata"`
	EnvdVersion string            `json:"envdVersion"`
	StartedAt   string            `json:"startedAt"`
	EndAt       string            `json:"endAt"`
	State       string            `json:"state"`
	CPUCount    int64             `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	// VolumeMounts is always empty: sbx has no volumes.
	VolumeMounts []struct{} `json:"volumeMounts"`

	AllowInternetAccess *bool          `json:"allowInternetAccess,omitempty"`
	EnvdAccessToken     string         `json:"envdAccessToken,omitempty"`
	Domain              *string        `json:"domain,omitempty"`
	Network             *networkJSON   `json:"network,omitempty"`
	Lifecycle           *lifecycleJSON `json:"lifecycle,omitempty"`
}

type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// networkJSON is E2B's network configuration: allowOut and denyOut map to
// sbx's tiers (mapNetwork).
type networkJSON struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic *bool    `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    string   `json:"maskRequestHost,omitempty"`
}

// newSandboxJSON is E2B's NewSandbox (v1 and v2).
type newSandboxJSON struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Secure              *bool             `json:"secure"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network      *networkJSON `json:"network"`
	VolumeMounts []any        `json:"volumeMounts"`
	MCP          any          `json:"mcp"`
}

// template maps E2B's templateID to sbx's template ("" is the default) and
// the label that remembers E2B's name.
func (h *Handler) template(name string) (tmpl string, label string, err error) {
	switch {
	case name == "" || slices.Contains(e2bTemplates, name):
		if name == "" {
			name = "base"
		}
		return "", name, nil
	case slices.Contains(h.m.Policy().Templates, name):
		return name, "", nil
	}
	return "", "", fmt.Errorf("%w: template '%s' not found (this server has: %s)", sandbox.ErrNotFound,
		truncate(name, 100), strings.Join(append(slices.Clone(e2bTemplates), h.m.Policy().Templates...), ", "))
}

// mapNetwork turns E2B's internet switch and network rules into a tier:
// nothing asked is the daemon's default tier; allow_internet_access false,
// or a denyOut of everything without allowOut, is none; allowOut is the
// allowlist tier (denyOut then only narrows it); denyOut alone is full
// minus those destinations.
func mapNetwork(internet *bool, n *networkJSON) (sandbox.Network, []string, []string, error) {
	var allow, deny []string
	if n != nil {
		allow, deny = n.AllowOut, n.DenyOut
		if n.MaskRequestHost != "" {
			return "", nil, nil, sandbox.Invalid("network.maskRequestHost", "is not supported")
		}
	}
	denyAll := slices.ContainsFunc(deny, func(d string) bool { return d == "0.0.0.0/0" || d == "::/0" })
	deny = slices.DeleteFunc(slices.Clone(deny), func(d string) bool { return d == "0.0.0.0/0" || d == "::/0" })
	switch {
	case internet != nil && !*internet:
		if len(allow) > 0 {
			return "", nil, nil, sandbox.Invalid("network.allowOut", "cannot be given with allow_internet_access false")
		}
		return sandbox.NetworkNone, nil, nil, nil
	case len(allow) > 0:
		return sandbox.NetworkAllowlist, allow, deny, nil
	case denyAll:
		return sandbox.NetworkNone, nil, nil, nil
	case len(deny) > 0:
		return sandbox.NetworkFull, nil, deny, nil
	case internet != nil && *internet:
		return sandbox.NetworkFull, nil, nil, nil
	}
	return "", nil, nil, nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) error {
	var in newSandboxJSON
	if err := decode(r, &in); err != nil {
		return err
	}
	tmpl, label, err := h.template(in.TemplateID)
	if err != nil {
		return err
	}
	switch {
	case in.AutoPause != nil && *in.AutoPause:
		return fmt.Errorf("%w: autoPause: sbx cannot pause a sandbox (its memory is not snapshotted); a sandbox is killed at its timeout", errors.ErrUnsupported)
	case in.AutoResume != nil && in.AutoResume.Enabled:
		return fmt.Errorf("%w: autoResume: sbx cannot pause a sandbox, so there is nothing to resume", errors.ErrUnsupported)
	case len(in.VolumeMounts) > 0:
		return fmt.Errorf("%w: volumeMounts: sbx has no volumes; copy files in with files.write", errors.ErrUnsupported)
	case in.MCP != nil:
		return fmt.Errorf("%w: mcp: sbx serves its tools over MCP itself, at /mcp", errors.ErrUnsupported)
	}
	timeout := defaultTimeout
	if in.Timeout != nil {
		if *in.Timeout < 1 {
			return sandbox.Invalid("timeout", "%d s is below 1", *in.Timeout)
		}
		timeout = time.Duration(*in.Timeout) * time.Second
	}
	tier, allow, deny, err := mapNetwork(in.AllowInternetAccess, in.Network)
	if err != nil {
		return err
	}
	labels := maps.Clone(in.Metadata)
	if _, ok := labels[templateLabel]; ok {
		return sandbox.Invalid("metadata", "%q is reserved", templateLabel)
	}
	if label != "" {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[templateLabel] = label
	}
	sb, err := h.m.Create(r.Context(), sandbox.CreateRequest{Template: tmpl, Timeout: timeout, Labels: labels,
		Env: in.EnvVars, Network: tier, NetworkAllow: allow, NetworkBlock: deny})
	if err != nil {
		return err
	}
	out, err := h.sandboxOf(r, sb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// sandboxOf is sb as E2B's Sandbox, with its access token.
func (h *Handler) sandboxOf(r *http.Request, sb sandbox.Sandbox) (sandboxJSON, error) {
	tok, err := h.m.AccessToken(r.Context(), sb.ID)
	if err != nil {
		return sandboxJSON{}, err
	}
	return sandboxJSON{SandboxID: string(sb.ID), TemplateID: h.templateOf(sb), ClientID: h.client,
		EnvdVersion: EnvdVersion, EnvdAccessToken: tok, TrafficAccessToken: tok}, nil
}

// templateOf is the template name E2B's client knows sb by.
func (h *Handler) templateOf(sb sandbox.Sandbox) string {
	if t := sb.Spec.Labels[templateLabel]; t != "" {
		return t
	}
	if p := h.m.Policy().Templates; len(p) > 0 && sb.Spec.Template == p[0] {
		return "base"
	}
	return sb.Spec.Template
}

// detailOf is sb as E2B's SandboxDetail; full adds the get-only fields.
func (h *Handler) detailOf(r *http.Request, sb sandbox.Sandbox, full bool) (detailJSON, error) {
	md := maps.Clone(sb.Spec.Labels)
	delete(md, templateLabel)
	if md == nil {
		md = map[string]string{}
	}
	d := detailJSON{
		SandboxID: string(sb.ID), TemplateID: h.templateOf(sb), ClientID: h.client, Metadata: md,
		EnvdVersion: EnvdVersion, StartedAt: sb.CreatedAt.UTC().Format(time.RFC3339Nano),
		EndAt: sb.ExpiresAt.UTC().Format(time.RFC3339Nano), State: "running",
		CPUCount: max(1, (sb.Spec.MilliCPUs+999)/1000), MemoryMB: sb.Spec.MemoryBytes >> 20,
		DiskSizeMB: sb.Spec.DiskBytes >> 20, VolumeMounts: []struct{}{},
	}
	if !full {
		return d, nil
	}
	tok, err := h.m.AccessToken(r.Context(), sb.ID)
	if err != nil {
		return detailJSON{}, err
	}
	internet := sb.Spec.Network == sandbox.NetworkFull || sb.Spec.Network == sandbox.NetworkAllowlist || sb.Spec.Network == sandbox.NetworkHost
	d.AllowInternetAccess = &internet
	d.EnvdAccessToken = tok
	d.Lifecycle = &lifecycleJSON{OnTimeout: "kill"}
	if len(sb.Spec.NetworkAllow) > 0 || len(sb.Spec.NetworkBlock) > 0 {
		d.Network = &networkJSON{AllowOut: sb.Spec.NetworkAllow, DenyOut: sb.Spec.NetworkBlock}
	}
	return d, nil
}

// running returns sandbox id for ctx's key when it is running; any other
// state is E2B's "not found" (it knows running and paused sandboxes only).
func (h *Handler) running(r *http.Request, op string) (sandbox.Sandbox, error) {
	id, err := sandbox.ParseID(r.PathValue("id"))
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: sandbox.ID(truncate(r.PathValue("id"), 64)), Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	sb, err := h.m.Get(r.Context(), id)
	if err != nil {
		return sandbox.Sandbox{}, sandbox.Wrap(op, id, err)
	}
	if sb.State != sandbox.StateRunning {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("sandbox %w: it is %s", sandbox.ErrNotFound, sb.State)}
	}
	return sb, nil
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) error {
	sb, err := h.running(r, "get")
	if err != nil {
		return err
	}
	d, err := h.detailOf(r, sb, true)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) error {
	id, err := sandbox.ParseID(r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := h.m.Delete(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// seconds reads {"<field>": n} of a timeout body; absent is def.
func seconds(r *http.Request, field string, def time.Duration) (time.Duration, error) {
	var in map[string]*int64
	if err := decode(r, &in); err != nil {
		return 0, err
	}
	v, ok := in[field]
	if !ok || v == nil {
		if def == 0 {
			return 0, sandbox.Invalid(field, "is required")
		}
		return def, nil
	}
	if *v < 1 {
		return 0, sandbox.Invalid(field, "%d s is below 1", *v)
	}
	return time.Duration(*v) * time.Second, nil
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) error {
	sb, err := h.running(r, "set_timeout")
	if err != nil {
		return err
	}
	d, err := seconds(r, "timeout", 0)
	if err != nil {
		return sandbox.Wrap("set_timeout", sb.ID, err)
	}
	if _, err := h.m.Update(r.Context(), sb.ID, manager.Update{Timeout: &d}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// extend makes sb expire d from now unless it already expires later.
func (h *Handler) extend(r *http.Request, sb sandbox.Sandbox, d time.Duration) (sandbox.Sandbox, error) {
	if !time.Now().Add(d).After(sb.ExpiresAt) {
		return sb, nil
	}
	return h.m.Update(r.Context(), sb.ID, manager.Update{Timeout: &d})
}

func (h *Handler) refresh(w http.ResponseWriter, r *http.Request) error {
	sb, err := h.running(r, "refresh")
	if err != nil {
		return err
	}
	d, err := seconds(r, "duration", defaultTimeout)
	if err != nil {
		return sandbox.Wrap("refresh", sb.ID, err)
	}
	if _, err := h.extend(r, sb, d); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) connect(w http.ResponseWriter, r *http.Request) error {
	sb, err := h.running(r, "connect")
	if err != nil {
		return err
	}
	d, err := seconds(r, "timeout", defaultTimeout)
	if err != nil {
		return sandbox.Wrap("connect", sb.ID, err)
	}
	if sb, err = h.extend(r, sb, d); err != nil {
		return err
	}
	out, err := h.sandboxOf(r, sb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request) error {
	sb, err := h.running(r, "resume")
	if err != nil {
		return err
	}
	return &sandbox.Error{Op: "resume", ID: sb.ID, Err: fmt.Errorf("%w: sandbox is already running", sandbox.ErrExists)}
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) error {
	sb, err := h.running(r, "pause")
	if err != nil {
		return err
	}
	return &sandbox.Error{Op: "pause", ID: sb.ID, Err: fmt.Errorf("%w: sbx cannot pause a sandbox (backend %s does not snapshot its memory); it keeps running until its timeout",
		errors.ErrUnsupported, sb.Backend)}
}

// listQuery is a list request's filters.
type listQuery struct {
	metadata     map[string]string
	states       []string
	template     string
	startedAfter time.Time
	desc         bool
	limit        int
	after        *cursor
}

// cursor is where a page ends: the last sandbox it held.
type cursor struct {
	created time.Time
	id      sandbox.ID
}

func (c cursor) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.created.UnixNano(), 10) + "." + string(c.id)))
}

func parseCursor(s string) (*cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		ns, id, ok := strings.Cut(string(b), ".")
		n, perr := strconv.ParseInt(ns, 10, 64)
		if ok && perr == nil {
			return &cursor{created: time.Unix(0, n), id: sandbox.ID(id)}, nil
		}
	}
	return nil, sandbox.Invalid("nextToken", "%q is not a token this server gave", truncate(s, 64))
}

// parseMetadata decodes the metadata filter, encoded in three layers by the
// SDK: each key and value percent-encoded, the pairs joined as a form
// (k=v&k2=v2), and that string sent as one query value. The query's own
// decode has undone the last; the form and each key and value are left.
func parseMetadata(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	form, err := url.ParseQuery(raw)
	if err != nil {
		return nil, sandbox.Invalid("metadata", "%q is not k=v pairs: %v", truncate(raw, 100), err)
	}
	out := map[string]string{}
	for k, vs := range form {
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err := errors.Join(err1, err2); err != nil {
			return nil, sandbox.Invalid("metadata", "%q: %v", truncate(k, 100), err)
		}
		out[dk] = dv
	}
	return out, nil
}

func parseList(r *http.Request, v2 bool) (listQuery, error) {
	q := r.URL.Query()
	var lq listQuery
	var err error
	if lq.metadata, err = parseMetadata(q.Get("metadata")); err != nil {
		return lq, err
	}
	if lq.metadata[templateLabel] != "" {
		return lq, sandbox.Invalid("metadata", "%q is reserved", templateLabel)
	}
	if !v2 {
		return lq, nil
	}
	for s := range strings.SplitSeq(q.Get("state"), ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case "running", "paused":
			lq.states = append(lq.states, s)
		default:
			return lq, sandbox.Invalid("state", "%q is not running or paused", truncate(s, 40))
		}
	}
	lq.template = q.Get("template")
	if s := q.Get("startedAfter"); s != "" {
		if lq.startedAfter, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return lq, sandbox.Invalid("startedAfter", "%q is not an RFC 3339 time", truncate(s, 64))
		}
	}
	switch o := q.Get("order"); o {
	case "", "asc":
	case "desc":
		lq.desc = true
	default:
		return lq, sandbox.Invalid("order", "%q is not asc or desc", truncate(o, 20))
	}
	lq.limit = 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return lq, sandbox.Invalid("limit", "%q is not an integer in [1, 100]", truncate(s, 20))
		}
		lq.limit = n
	}
	if s := q.Get("nextToken"); s != "" {
		if lq.after, err = parseCursor(s); err != nil {
			return lq, err
		}
	}
	return lq, nil
}

// list returns the page of ctx's key's running sandboxes lq selects, and the
// cursor of the next page ("" when this is the last).
func (h *Handler) list(r *http.Request, lq listQuery) ([]detailJSON, string, error) {
	if len(lq.states) > 0 && !slices.Contains(lq.states, "running") {
		return []detailJSON{}, "", nil // sbx has no paused sandboxes
	}
	all, err := h.m.List(r.Context(), lq.metadata)
	if err != nil {
		return nil, "", err
	}
	all = slices.DeleteFunc(all, func(sb sandbox.Sandbox) bool {
		return sb.State != sandbox.StateRunning || (lq.template != "" && h.templateOf(sb) != lq.template) ||
			(!lq.startedAfter.IsZero() && !sb.CreatedAt.After(lq.startedAfter))
	})
	// The store lists in creation order (created_at, then insertion for
	// sandboxes made within one millisecond); a stable sort on the time
	// keeps that order for ties, so pages follow creation exactly.
	slices.SortStableFunc(all, func(a, b sandbox.Sandbox) int { return a.CreatedAt.Compare(b.CreatedAt) })
	if lq.desc {
		slices.Reverse(all)
	}
	if lq.after != nil {
		all = all[resumeAt(all, *lq.after, lq.desc):]
	}
	next := ""
	if lq.limit > 0 && len(all) > lq.limit {
		all = all[:lq.limit]
		last := all[len(all)-1]
		next = cursor{created: last.CreatedAt, id: last.ID}.token()
	}
	out := make([]detailJSON, 0, len(all))
	for _, sb := range all {
		d, err := h.detailOf(r, sb, false)
		if err != nil {
			return nil, "", err
		}
		out = append(out, d)
	}
	return out, next, nil
}

func (h *Handler) listV2(w http.ResponseWriter, r *http.Request) error {
	lq, err := parseList(r, true)
	if err != nil {
		return err
	}
	out, next, err := h.list(r, lq)
	if err != nil {
		return err
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) listV1(w http.ResponseWriter, r *http.Request) error {
	lq, err := parseList(r, false)
	if err != nil {
		return err
	}
	out, _, err := h.list(r, lq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// metricJSON is E2B's SandboxMetric.
type metricJSON struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int64   `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// cpuSample is a sandbox's CPU reading (Handler.cpu): a metric's CPU use
// is over the time since the one before (since the start for the first).
type cpuSample struct {
	at    time.Time
	usage time.Duration
}

// metrics answers one sample, taken now, when now is inside [start, end]
// (unix seconds, each optional): sbx keeps no history of resource use.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) error {
	sb, err := h.running(r, "metrics")
	if err != nil {
		return err
	}
	now := time.Now()
	for _, b := range []struct {
		name  string
		after bool
	}{{"start", true}, {"end", false}} {
		s := r.URL.Query().Get(b.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return sandbox.Wrap("metrics", sb.ID, sandbox.Invalid(b.name, "%q is not unix seconds", truncate(s, 20)))
		}
		if (b.after && now.Unix() < n) || (!b.after && now.Unix() > n) {
			writeJSON(w, http.StatusOK, []metricJSON{})
			return nil
		}
	}
	st, err := h.m.Stats(r.Context(), sb.ID)
	if err != nil {
		return err
	}
	cpus := max(1, (sb.Spec.MilliCPUs+999)/1000)
	prev := cpuSample{at: sb.CreatedAt}
	if v, ok := h.cpu.Load(sb.ID); ok {
		prev = v.(cpuSample)
	}
	h.cpu.Store(sb.ID, cpuSample{at: now, usage: st.CPUUsage})
	pct := 0.0
	if wall := now.Sub(prev.at); wall > 0 && st.CPUUsage >= prev.usage {
		pct = min(100, 100*float64(st.CPUUsage-prev.usage)/float64(wall)/float64(cpus))
	}
	writeJSON(w, http.StatusOK, []metricJSON{{
		Timestamp: now.UTC().Format(time.RFC3339Nano), TimestampUnix: now.Unix(), CPUCount: cpus, CPUUsedPct: pct,
		MemUsed: st.MemoryBytes, MemTotal: sb.Spec.MemoryBytes, DiskUsed: st.DiskBytes, DiskTotal: sb.Spec.DiskBytes,
	}})
	return nil
}

// logEntry is one line of a sandbox's log: its audit records (what was
// done to and in it), oldest first.
type logEntry struct {
	Timestamp string            `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

func (h *Handler) logEntries(r *http.Request) (sandbox.ID, []logEntry, error) {
	id, err := sandbox.ParseID(r.PathValue("id"))
	if err != nil {
		return "", nil, err
	}
	if _, err := h.m.Get(r.Context(), id); err != nil {
		return id, nil, err
	}
	limit := 1000
	if s := r.URL.Query().Get("limit"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 && n <= 1000 {
			limit = n
		} else {
			return id, nil, sandbox.Wrap("logs", id, sandbox.Invalid("limit", "%q is not an integer in [1, 1000]", truncate(s, 20)))
		}
	}
	var since time.Time
	if s := r.URL.Query().Get("start"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return id, nil, sandbox.Wrap("logs", id, sandbox.Invalid("start", "%q is not unix milliseconds", truncate(s, 20)))
		}
		since = time.UnixMilli(n)
	}
	recs, err := h.m.Audit(r.Context(), manager.AuditQuery{SandboxID: string(id), Since: since, Limit: limit})
	if err != nil {
		return id, nil, err
	}
	out := make([]logEntry, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- { // the store gives newest first
		rec := recs[i]
		level := "info"
		if rec.Outcome != "ok" {
			level = "error"
		}
		msg := strings.TrimSpace(rec.Action + " " + rec.Target)
		if rec.Detail != "" {
			msg += " (" + rec.Detail + ")"
		}
		if rec.Outcome != "ok" {
			msg += ": " + rec.Outcome
		}
		out = append(out, logEntry{Timestamp: rec.At.UTC().Format(time.RFC3339Nano), Level: level, Message: msg,
			Fields: map[string]string{"action": rec.Action, "target": rec.Target, "outcome": rec.Outcome, "detail": rec.Detail}})
	}
	return id, out, nil
}

func (h *Handler) logsV1(w http.ResponseWriter, r *http.Request) error {
	_, entries, err := h.logEntries(r)
	if err != nil {
		return err
	}
	type line struct {
		Timestamp string `json:"timestamp"`
		Line      string `json:"line"`
	}
	lines := make([]line, 0, len(entries))
	for _, e := range entries {
		lines = append(lines, line{Timestamp: e.Timestamp, Line: e.Message})
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": lines, "logEntries": entries})
	return nil
}

func (h *Handler) logsV2(w http.ResponseWriter, r *http.Request) error {
	_, entries, err := h.logEntries(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": entries})
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// resumeAt is where the page after cursor c starts in all (sorted as the
// listing is). The cursor's own sandbox, when still listed, marks the spot
// exactly; when it is gone, the page starts at the first sandbox not older
// (not newer, descending) than it, so a tie within its millisecond repeats
// an entry rather than losing one.
func resumeAt(all []sandbox.Sandbox, c cursor, desc bool) int {
	if i := slices.IndexFunc(all, func(sb sandbox.Sandbox) bool { return sb.ID == c.id }); i >= 0 {
		return i + 1
	}
	for i, sb := range all {
		cmp := sb.CreatedAt.Compare(c.created)
		if (!desc && cmp >= 0) || (desc && cmp <= 0) {
			return i
		}
	}
	return len(all)
}
