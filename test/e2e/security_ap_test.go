// This file implements the AP rows of the attack catalogue (SECURITY.md §5):
// authentication on every route, ids, key storage, hostile bodies, injection
// through fields, and fuzzing over the OpenAPI document.

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/internal/server/e2bapi"
	"sbx.dev/sbx/internal/server/httpapi"
)

// apiRoute is one operation of the OpenAPI document.
type apiRoute struct {
	method, path string
	public       bool
	op           map[string]any
}

// docRoutes reads the document the daemon serves, without a key.
func (r *run) docRoutes() ([]apiRoute, map[string]any, error) {
	resp, err := http.Get(r.d.url + "/v1/openapi.json")
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("GET /v1/openapi.json: %v", err)
	}
	paths, _ := doc["paths"].(map[string]any)
	var out []apiRoute
	for p, ops := range paths {
		for m, op := range ops.(map[string]any) {
			if m == "parameters" {
				continue
			}
			o, _ := op.(map[string]any)
			sec, has := o["security"].([]any)
			out = append(out, apiRoute{method: strings.ToUpper(m), path: p, public: has && len(sec) == 0, op: o})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path+out[i].method < out[j].path+out[j].method })
	return out, doc, nil
}

// fill puts ids into a route's path.
func fill(path, id, pid string) string {
	return strings.NewReplacer("{id}", id, "{pid}", pid).Replace(path)
}

const unknownID = "aaaaaaaaaaaaaaaaaaaaaaaaaa"

// --- AP-01: authentication on every route -----------------------------------------

func ap01Control(r *run) error {
	routes, _, err := r.docRoutes()
	if err != nil {
		return err
	}
	// The walk covers every registered route, and nothing else.
	var inDoc []string
	for _, rt := range routes {
		inDoc = append(inDoc, rt.method+" "+rt.path)
	}
	registered := httpapi.Patterns()
	slices.Sort(inDoc)
	slices.Sort(registered)
	if !slices.Equal(inDoc, registered) {
		return fmt.Errorf("the OpenAPI document (%d routes) and the router (%d routes) differ:\n doc %v\n mux %v", len(inDoc), len(registered), inDoc, registered)
	}
	// With the key, each route gives its own answer, never 401.
	for _, rt := range routes {
		st, b := r.raw(rt.method, fill(rt.path, unknownID, "p1"), strings.NewReader("{}"), map[string]string{"Content-Type": "application/json"})
		if st == 401 || st >= 500 {
			return fmt.Errorf("control: %s %s with the key = %d %.200s", rt.method, rt.path, st, b)
		}
	}
	r.set("routes", fmt.Sprint(len(routes)))
	// POST /v1/sandboxes with {} made a sandbox: the row owns it.
	for _, id := range listIDs(r) {
		if id != r.env.sibling {
			r.sandboxes = append(r.sandboxes, id)
		}
	}
	return nil
}

// walkUnauthorized sends every route with each header of auths to d and
// records a breach for each answer that is not 401 (200 on public routes).
func (r *run) walkUnauthorized(d *daemon, routes []apiRoute, auths map[string]string) int {
	n := 0
	for _, rt := range routes {
		for name, auth := range auths {
			req, _ := http.NewRequest(rt.method, d.url+fill(rt.path, unknownID, "p1"), strings.NewReader(`{}`))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				r.breach("AP-01: %s %s (%s): %v", rt.method, rt.path, name, err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r.record(b)
			n++
			want := 401
			if rt.public {
				want = 200
			}
			if resp.StatusCode != want {
				r.breach("AP-01: %s %s with %s = %d %.150s, want %d", rt.method, rt.path, name, resp.StatusCode, b, want)
				continue
			}
			if want == 401 {
				var e errorBody
				json.Unmarshal(b, &e)
				if e.Error.Code != "unauthenticated" || resp.Header.Get("WWW-Authenticate") == "" {
					r.breach("AP-01: %s %s with %s: 401 body %s, WWW-Authenticate %q", rt.method, rt.path, name, b, resp.Header.Get("WWW-Authenticate"))
				}
			}
		}
	}
	return n
}

// walkE2BControl sends every route of E2B's control plane to d with each
// X-API-Key of keys ("" for none) and records a breach for each answer that
// is not E2B's 401 ({"code":401,…}, which the SDK turns into its
// AuthenticationError).
func (r *run) walkE2BControl(d *daemon, keys map[string]string) int {
	n := 0
	for _, p := range e2bapi.Patterns() {
		method, path, _ := strings.Cut(p, " ")
		for name, k := range keys {
			req, _ := http.NewRequest(method, d.url+strings.ReplaceAll(path, "{id}", r.env.sibling), strings.NewReader(`{}`))
			req.Header.Set("Content-Type", "application/json")
			if k != "" {
				req.Header.Set("X-API-Key", k)
			}
			st, _, b := r.send(req, nil)
			n++
			var e struct{ Code int }
			if st != 401 || json.Unmarshal(b, &e) != nil || e.Code != 401 {
				r.breach("AP-01: E2B %s %s with %s = %d %.150s, want 401 {\"code\":401}", method, path, name, st, b)
			}
		}
	}
	return n
}

// walkE2BData sends E2B's data-plane routes for the sibling, which is
// running, with no access token and with wrong ones: each must be 401, the
// health route alone answering (204). The control: the sibling's real token
// (read by its owner, the admin key) opens a read-only route.
func (r *run) walkE2BData(key string) int {
	st, _, b := r.call(r.d, key, "GET", "/sandboxes/"+r.env.sibling, nil, map[string]string{"X-API-Key": key})
	var info struct{ EnvdAccessToken string }
	if st != 200 || json.Unmarshal(b, &info) != nil || info.EnvdAccessToken == "" {
		r.breach("AP-01: control: the sibling's E2B info = %d %.200s", st, b)
		return 0
	}
	flip := []byte(info.EnvdAccessToken)
	flip[0] ^= 1
	type dataRoute struct {
		port         int
		method, path string
		ctype, body  string
	}
	routes := []dataRoute{
		{49983, "POST", "/process.Process/Start", "application/connect+json", "\x00\x00\x00\x00\x20{\"process\":{\"cmd\":\"/bin/true\"}}"},
		{49983, "POST", "/process.Process/List", "application/json", "{}"},
		{49983, "POST", "/process.Process/SendSignal", "application/json", `{"process":{"pid":1},"signal":"SIGNAL_SIGKILL"}`},
		{49983, "POST", "/filesystem.Filesystem/Stat", "application/json", `{"path":"/workspace"}`},
		{49983, "POST", "/filesystem.Filesystem/Remove", "application/json", `{"path":"/workspace/secret.txt"}`},
		{49983, "GET", "/files?path=/workspace/secret.txt", "", ""},
		{49983, "POST", "/files?path=/workspace/x", "application/octet-stream", "x"},
		{49999, "POST", "/execute", "application/json", `{"code":"1"}`},
		{49999, "GET", "/contexts", "", ""},
		{49999, "POST", "/contexts", "application/json", `{}`},
	}
	tokens := map[string]string{"no token": "", "wrong token": "wrong", "token with one bit off": string(flip),
		"the API key as a token": key}
	n := 0
	for _, rt := range routes {
		for name, tok := range tokens {
			req, _ := http.NewRequest(rt.method, r.d.url+rt.path, strings.NewReader(rt.body))
			req.Header.Set("E2b-Sandbox-Id", r.env.sibling)
			req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(rt.port))
			if rt.ctype != "" {
				req.Header.Set("Content-Type", rt.ctype)
			}
			if tok != "" {
				req.Header.Set("X-Access-Token", tok)
			}
			st, _, b := r.send(req, nil)
			n++
			if st != 401 {
				r.breach("AP-01: E2B data plane %d %s %s with %s = %d %.150s, want 401", rt.port, rt.method, rt.path, name, st, b)
			}
		}
	}
	hdr := map[string]string{"E2b-Sandbox-Id": r.env.sibling, "E2b-Sandbox-Port": "49983"}
	if st, _, b := r.call(r.d, "", "GET", "/health", nil, hdr); st != 204 {
		r.breach("AP-01: E2B health of a running sandbox without a token = %d %.150s, want 204", st, b)
	}
	hdr["X-Access-Token"] = info.EnvdAccessToken
	if st, _, b := r.call(r.d, "", "POST", "/filesystem.Filesystem/Stat", map[string]string{"path": ""}, hdr); st != 200 { // "": the workdir
		r.breach("AP-01: control: Stat with the sibling's own token = %d %.150s, want 200", st, b)
	}
	return n
}

func ap01Attack(r *run) error {
	routes, _, err := r.docRoutes()
	if err != nil {
		return err
	}
	key := r.d.key
	flip := []byte(key)
	flip[len(flip)-1] ^= 1
	auths := map[string]string{
		"no header":             "",
		"bare Bearer":           "Bearer",
		"empty token":           "Bearer ",
		"Basic scheme":          "Basic " + key,
		"wrong key":             "Bearer sbx_wrong",
		"key plus a byte":       "Bearer " + key + "x",
		"key with one bit off":  "Bearer " + string(flip),
		"key prefix":            "Bearer " + key[:len(key)-1],
		"key as a second field": "Bearer x " + key,
	}
	n := r.walkUnauthorized(r.d, routes, auths)
	// Routes that do not exist answer 401 too: no map of the router for
	// callers without a key.
	absent := []apiRoute{{method: "GET", path: "/metrics"}, {method: "GET", path: "/debug/pprof/"},
		{method: "GET", path: "/mcp"}}
	n += r.walkUnauthorized(r.d, absent, map[string]string{"no header": ""})
	n += r.walkTerminalKeys(key)
	// A revoked key: a second daemon whose admin key was lost and replaced.
	dir, err := os.MkdirTemp("", "sbx-security-revoke-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	old := startDaemon(r.t, dir, "SANDBOX_BACKEND="+r.backend, "SBX_POOL_SIZE=0")
	oldKey := old.key
	old.stop()
	os.Remove(filepath.Join(dir, "admin.key"))
	fresh := startDaemon(r.t, dir, "SANDBOX_BACKEND="+r.backend, "SBX_POOL_SIZE=0")
	if fresh.key == oldKey {
		fresh.cleanup()
		return fmt.Errorf("the restarted daemon kept the lost key")
	}
	n += r.walkUnauthorized(fresh, routes, map[string]string{"revoked key": "Bearer " + oldKey})
	e2bKeys := map[string]string{"no key": "", "wrong key": "sbx_wrong", "key with one bit off": string(flip),
		"key prefix": key[:len(key)-1]}
	ne := r.walkE2BControl(r.d, e2bKeys)
	ne += r.walkE2BControl(fresh, map[string]string{"revoked key": oldKey})
	ne += r.walkE2BData(key)
	fresh.t = r.t
	fresh.cleanup()
	r.note("%d unauthorised requests over %s documented routes, 3 absent ones (/metrics, /debug/pprof, /mcp) and the terminal's WebSocket keys", n, r.get("routes"))
	r.note("%d more over E2B's %d control-plane routes (X-API-Key) and its data plane (access tokens)", ne, len(e2bapi.Patterns()))
	r.note("gap: no key expiry exists yet; constant-time comparison is by code (store.LookupKey, subtle.ConstantTimeCompare), not measured")
	return nil
}

// walkTerminalKeys tries the terminal route's own ways of carrying a key, as
// WebSocket handshakes: a wrong or revoked-looking key offered as the
// bearer.<key> subprotocol, and the right key in the URL, which is never
// read. Each must be 401, with nothing started.
func (r *run) walkTerminalKeys(key string) int {
	path := r.d.url + fill("/v1/sandboxes/{id}/pty", unknownID, "p1")
	tries := []struct {
		name, query, protocols string
	}{
		{"wrong subprotocol key", "", "sbx.pty.v1, bearer.sbx_wrong"},
		{"key plus a byte as subprotocol", "", "sbx.pty.v1, bearer." + key + "x"},
		{"empty subprotocol key", "", "sbx.pty.v1, bearer."},
		{"key in the URL", "?access_token=" + key + "&key=" + key + "&token=" + key, "sbx.pty.v1"},
		{"key as a subprotocol not prefixed", "", "sbx.pty.v1, " + key},
	}
	for _, tr := range tries {
		req, _ := http.NewRequest("GET", path+tr.query, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		req.Header.Set("Sec-WebSocket-Protocol", tr.protocols)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			r.breach("AP-01: pty (%s): %v", tr.name, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r.record(b)
		if resp.StatusCode != 401 {
			r.breach("AP-01: pty with %s = %d %.150s, want 401", tr.name, resp.StatusCode, b)
		}
	}
	return len(tries)
}

// --- AP-03: id guessing -----------------------------------------------------------

func ap03Control(r *run) error {
	for range 5 {
		r.create(nil)
	}
	st, b := r.api("GET", "/v1/sandboxes/"+r.a(), nil)
	if st != 200 {
		return fmt.Errorf("control: GET of an existing id = %d %s", st, b)
	}
	return nil
}

func ap03Attack(r *run) error {
	ids := append([]string{r.env.sibling}, r.sandboxes...)
	for _, id := range ids {
		if !idShape.MatchString(id) {
			r.breach("AP-03: id %q is not 26 characters of base32 (130 bits)", id)
		}
	}
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			k := 0
			for k < len(ids[i]) && ids[i][k] == ids[j][k] {
				k++
			}
			if k > 4 {
				r.breach("AP-03: ids %s and %s share a %d-character prefix: not random", ids[i], ids[j], k)
			}
		}
	}
	// Unknown, deleted and malformed ids answer alike on every route kind.
	deleted := r.sandboxes[len(r.sandboxes)-1]
	if st, b := r.api("DELETE", "/v1/sandboxes/"+deleted, nil); st != 204 {
		return fmt.Errorf("DELETE = %d %s", st, b)
	}
	probes := []string{unknownID, deleted, "AAAAAAAAAAAAAAAAAAAAAAAAAA", "short", strings.Repeat("z", 200), "..%2f..%2fetc"}
	for _, rt := range []struct{ method, suffix string }{{"GET", ""}, {"DELETE", ""}, {"POST", "/exec"}, {"GET", "/files/read?path=x"}, {"GET", "/processes"}} {
		var first string
		for _, id := range probes {
			st, b := r.api(rt.method, "/v1/sandboxes/"+id+rt.suffix, map[string]any{"command": "true"})
			var e errorBody
			json.Unmarshal(b, &e)
			// The message names the id as given (decoded, maybe cut): "op <id>: …".
			msg := e.Error.Message
			if op, rest, ok := strings.Cut(msg, " "); ok {
				if _, tail, ok := strings.Cut(rest, ": "); ok {
					msg = op + " <id>: " + tail
				}
			}
			shape := fmt.Sprintf("%d %s %s", st, e.Error.Code, msg)
			if first == "" {
				first = shape
			} else if shape != first {
				r.breach("AP-03: %s …%s: id %.30s answers %q, an unknown id %q", rt.method, rt.suffix, id, shape, first)
			}
		}
	}
	// Timing is printed, never asserted (no timing assertions).
	med := func(id string) time.Duration {
		var ds []time.Duration
		for range 15 {
			_, _, d := r.timedCall("GET", "/v1/sandboxes/"+id, nil)
			ds = append(ds, d)
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	r.note("median GET: unknown id %s, deleted id %s", med(unknownID), med(deleted))
	r.note("gap: foreign ids need tenants (a later issue); compared unknown, deleted and malformed ids only")
	return nil
}

// --- AP-06: key storage -----------------------------------------------------------

func ap06Control(r *run) error {
	hash := fmt.Sprintf("%x", sha256Sum([]byte(r.d.key)))
	found := false
	filepath.WalkDir(r.d.dataDir, func(p string, de os.DirEntry, err error) error {
		if err == nil && de.Type().IsRegular() && strings.HasPrefix(de.Name(), "sbx.db") {
			b, _ := os.ReadFile(p)
			found = found || bytes.Contains(b, []byte(hash))
		}
		return nil
	})
	if !found {
		return fmt.Errorf("control: the store does not hold the key's hash: the scan cannot see keys at rest")
	}
	if !strings.Contains(r.d.log.String(), "key_") {
		return fmt.Errorf("control: the daemon's log does not name the key's id")
	}
	return nil
}

func ap06Attack(r *run) error {
	key := r.d.key
	r.forbidden = append(r.forbidden, key)
	filepath.WalkDir(r.d.dataDir, func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() || de.Name() == "admin.key" {
			return nil
		}
		if fi, _ := de.Info(); fi != nil && fi.Size() > 256<<20 {
			return nil
		}
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(key)) {
			r.breach("AP-06: the raw key is in %s", p)
		}
		return nil
	})
	if fi, err := os.Stat(filepath.Join(r.d.dataDir, "admin.key")); err != nil || fi.Mode().Perm() != 0o600 {
		r.breach("AP-06: admin.key mode %v, want 0600 (%v)", fi.Mode(), err)
	}
	if strings.Contains(r.d.log.String(), key) {
		r.breach("AP-06: the raw key is in the daemon's log")
	}
	// Errors never echo what was sent as a key.
	marker := "sbx_" + randHex(12)
	for _, auth := range []string{"Bearer " + marker, "Basic " + marker, marker, "Bearer " + key + marker} {
		req, _ := http.NewRequest("GET", r.d.url+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r.record(b)
		if bytes.Contains(b, []byte(marker)) || strings.Contains(fmt.Sprint(resp.Header), marker) {
			r.breach("AP-06: a 401 echoes the key sent: %s", b)
		}
	}
	// A body that carries a key does not make it into any answer or log.
	r.api("POST", "/v1/sandboxes", map[string]any{"labels": map[string]string{"k": marker}, "template": marker})
	if strings.Contains(r.d.log.String(), marker) {
		r.note("a label value sent at create is in the daemon's log (not a key)")
	}
	for _, id := range listIDs(r) {
		if id != r.env.sibling {
			r.sandboxes = append(r.sandboxes, id)
		}
	}
	return nil
}

func listIDs(r *run) []string {
	_, b := r.d.apiQuiet("GET", "/v1/sandboxes", nil)
	var list struct {
		Sandboxes []struct{ ID string } `json:"sandboxes"`
	}
	json.Unmarshal(b, &list)
	var out []string
	for _, s := range list.Sandboxes {
		out = append(out, s.ID)
	}
	return out
}

// --- AP-07: hostile JSON ----------------------------------------------------------

func ap07Control(r *run) error {
	id := r.create(map[string]any{"labels": map[string]string{"ap07": "ok"}})
	res := r.exec(id, map[string]any{"command": "echo ok"})
	if res.Stdout != "ok\n" {
		return fmt.Errorf("control: a well-formed exec = %+v", res)
	}
	return nil
}

func ap07Attack(r *run) error {
	id := r.a()
	w := r.d.rssWatch()
	defer w.stop()
	logStart := len(r.d.log.String())
	big := func() io.Reader { return io.MultiReader(strings.NewReader(`{"template":"`), &zeroReader{n: 100 << 20}) }
	bodies := []struct {
		name string
		body func() io.Reader
		size int64 // -1: chunked
	}{
		{"100 MB with a length", big, 100<<20 + 13},
		{"100 MB chunked", big, -1},
		{"10k nested arrays", func() io.Reader {
			return strings.NewReader(`{"labels":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`)
		}, 0},
		{"10k nested objects", func() io.Reader {
			return strings.NewReader(strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000))
		}, 0},
		{"a million-element array of the wrong type", func() io.Reader {
			return strings.NewReader(`{"labels":[` + strings.Repeat(`1,`, 1<<20) + `1]}`)
		}, 0},
		{"duplicate keys", func() io.Reader { return strings.NewReader(`{"command":"true","command":"false"}`) }, 0},
		{"wrong types", func() io.Reader { return strings.NewReader(`{"command":1,"timeout":"x","env":[]}`) }, 0},
		{"invalid UTF-8", func() io.Reader { return strings.NewReader("{\"command\":\"echo \xff\xfe\"}") }, 0},
		{"not an object", func() io.Reader { return strings.NewReader(`[1,2,3]`) }, 0},
		{"trailing data", func() io.Reader { return strings.NewReader(`{} {}`) }, 0},
	}
	for _, route := range []string{"/v1/sandboxes", "/v1/sandboxes/" + id + "/exec", "/v1/sandboxes/" + id + "/files/write"} {
		method := "POST"
		if strings.HasSuffix(route, "/write") {
			method = "PUT"
		}
		for _, hb := range bodies {
			req, _ := http.NewRequest(method, r.d.url+route, hb.body())
			if hb.size != 0 {
				req.ContentLength = hb.size
			}
			req.Header.Set("Authorization", "Bearer "+r.d.key)
			req.Header.Set("Content-Type", "application/json")
			began := time.Now()
			resp, err := http.DefaultClient.Do(req)
			d := time.Since(began)
			if err != nil {
				// The server may hang up on a body still being sent.
				r.note("%s %s: connection ended while sending (%v)", hb.name, route, err)
				continue
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			r.record(b)
			if resp.StatusCode != 400 && resp.StatusCode != 413 {
				r.breach("AP-07: %s to %s = %d %.200s, want 400 or 413", hb.name, route, resp.StatusCode, b)
			}
			if d > 10*time.Second {
				r.breach("AP-07: %s to %s took %s: not a fast refusal", hb.name, route, d)
			}
		}
	}
	if strings.Contains(r.d.log.String()[logStart:], "panic") {
		r.breach("AP-07: the daemon's log shows a panic")
	}
	peak, start := w.stop()
	r.note("daemon RSS %d MiB at the start, peak %d MiB", start>>20, peak>>20)
	if peak-start > rssBudget {
		r.breach("AP-07: daemon RSS grew by %d MiB (budget %d MiB)", (peak-start)>>20, rssBudget>>20)
	}
	return nil
}

// --- AP-09: injection through fields ----------------------------------------------

func ap09Setup(r *run) error {
	r.create(nil)
	return nil
}

func ap09Control(r *run) error {
	id := r.a()
	res := r.exec(id, map[string]any{"argv": []string{"echo", "hello"}})
	if res.Stdout != "hello\n" {
		return fmt.Errorf("control: argv echo = %+v", res)
	}
	// The far end: a file named through the API shows in the sandbox.
	if st, b := r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": r.wire("plain.txt"), "content": "p"}); st != 200 {
		return fmt.Errorf("control: write plain.txt = %d %s", st, b)
	}
	if res := r.sh(id, "cat plain.txt"); res.Stdout != "p" {
		return fmt.Errorf("control: plain.txt = %+v", res)
	}
	return nil
}

func ap09Attack(r *run) error {
	id := r.a()
	host := r.s.dir + "/pwned"
	inj := []string{"a; touch pwned-semi " + host, "$(touch pwned-sub)", "`touch pwned-bt`", "| touch pwned-pipe", "&& touch pwned-and", "\n touch pwned-nl"}
	res := r.exec(id, map[string]any{"argv": append([]string{"echo"}, inj...)})
	if want := strings.Join(inj, " ") + "\n"; res.Stdout != want {
		r.breach("AP-09: argv was not passed verbatim: %q, want %q", res.Stdout, want)
	}
	// cwd: refused or not found, never run.
	for _, cwd := range []string{"; touch pwned-cwd", "$(touch pwned-cwd2)", "/tmp;touch pwned-cwd3", "`touch pwned-cwd4`"} {
		st, b := r.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}, "cwd": cwd})
		if st >= 500 {
			r.breach("AP-09: cwd %q = %d %.200s", cwd, st, b)
		}
	}
	// env names: validated and named; values passed as data.
	for _, name := range []string{"A;touch pwned-env", "A B", "", "=x", "A=B", "A\x00B", "$(touch pwned-env2)"} {
		st, b := r.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}, "env": map[string]string{name: "v"}})
		if st != 400 || !strings.Contains(string(b), "env") {
			r.breach("AP-09: env name %q = %d %.200s, want 400 naming env", name, st, b)
		}
	}
	val := "$(touch pwned-envval); `touch pwned-envval2`"
	res = r.exec(id, map[string]any{"argv": []string{"printenv", "V"}, "env": map[string]string{"V": val}})
	if res.Stdout != val+"\n" {
		r.breach("AP-09: an env value was not passed as data: %q", res.Stdout)
	}
	// File names: literal, and nothing runs.
	for _, n := range []string{"pwned-fn-$(touch pwned-fn).txt", "a;touch pwned-fn2", "`touch pwned-fn3`"} {
		st, b := r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": r.wire(n), "content": "x"})
		if st >= 500 {
			r.breach("AP-09: write %q = %d %.200s", n, st, b)
		}
	}
	// A tag, stored and echoed as data.
	r.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}, "tag": "$(touch pwned-tag)"})
	r.note("gap: exec has no user field yet")
	return nil
}

func ap09Evidence(r *run) error {
	res := r.sh(r.a(), "ls -a")
	for _, name := range strings.Split(res.Stdout, "\n") {
		if strings.HasPrefix(name, "pwned") && !strings.HasPrefix(name, "pwned-fn-$(") {
			r.breach("AP-09: %q exists: a field was run by a shell", name)
		}
	}
	if !strings.Contains(res.Stdout, "pwned-fn-$(touch pwned-fn).txt") {
		return fmt.Errorf("the literal file name is not in the workspace: %q", res.Stdout)
	}
	r.checkHostDir()
	return nil
}

// --- AP-12: schema fuzzing --------------------------------------------------------

func ap12Setup(r *run) error {
	r.create(nil)
	return nil
}

func ap12Control(r *run) error {
	// The fuzz target answers well-formed requests.
	if st, b := r.api("GET", "/v1/sandboxes/"+r.a()+"/files/list?path=/", nil); st != 200 {
		return fmt.Errorf("control: list / = %d %s", st, b)
	}
	return nil
}

// fuzzValue generates a value for schema s of doc: mostly of the right type,
// sometimes not, with the edge values parsers get wrong.
func fuzzValue(rnd *rand.Rand, doc map[string]any, s map[string]any, depth int) any {
	if ref, ok := s["$ref"].(string); ok {
		s = resolveRef(doc, ref)
	}
	strs := []string{"", "x", "/", "..", "../../etc/passwd", "\x00", "é", strings.Repeat("a", 5000), "%2e%2e", "-1", "true", "SIGKILL", "0644", "{}", "\u202e"}
	nums := []any{0, -1, 1, 1 << 31, -(1 << 62), 1e300, 0.5, 3600, 3601, 1 << 53}
	if depth > 4 || rnd.IntN(8) == 0 { // wrong or odd type
		switch rnd.IntN(5) {
		case 0:
			return nil
		case 1:
			return strs[rnd.IntN(len(strs))]
		case 2:
			return nums[rnd.IntN(len(nums))]
		case 3:
			return []any{1, "a"}
		default:
			return map[string]any{"x": 1}
		}
	}
	typ, _ := s["type"].(string)
	if ts, ok := s["type"].([]any); ok && len(ts) > 0 {
		typ, _ = ts[rnd.IntN(len(ts))].(string)
	}
	if en, ok := s["enum"].([]any); ok && len(en) > 0 && rnd.IntN(4) > 0 {
		return en[rnd.IntN(len(en))]
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		for k, ps := range props {
			if rnd.IntN(2) == 0 {
				psm, _ := ps.(map[string]any)
				out[k] = fuzzValue(rnd, doc, psm, depth+1)
			}
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok && rnd.IntN(2) == 0 {
			out[strs[rnd.IntN(len(strs))]] = fuzzValue(rnd, doc, ap, depth+1)
		}
		return out
	case "array":
		items, _ := s["items"].(map[string]any)
		var out []any
		for range rnd.IntN(4) {
			out = append(out, fuzzValue(rnd, doc, items, depth+1))
		}
		return out
	case "integer", "number":
		return nums[rnd.IntN(len(nums))]
	case "boolean":
		return rnd.IntN(2) == 0
	}
	return strs[rnd.IntN(len(strs))]
}

func resolveRef(doc map[string]any, ref string) map[string]any {
	var cur any = doc
	for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, _ := cur.(map[string]any)
		cur = m[p]
	}
	m, _ := cur.(map[string]any)
	return m
}

// fuzzRequest builds one request for rt.
func fuzzRequest(rnd *rand.Rand, doc map[string]any, rt apiRoute, id string) (string, []byte) {
	ids := []string{id, id, id, unknownID, "x", "..", strings.Repeat("b", 300)}
	pids := []string{"p1", "0", "-1", "1", "pffffffffff", "..%2f"}
	path := fill(rt.path, ids[rnd.IntN(len(ids))], pids[rnd.IntN(len(pids))])
	var qs []string
	params, _ := rt.op["parameters"].([]any)
	for _, p := range params {
		pm, _ := p.(map[string]any)
		if ref, ok := pm["$ref"].(string); ok {
			pm = resolveRef(doc, ref)
		}
		if pm["in"] != "query" || rnd.IntN(3) == 0 {
			continue
		}
		schema, _ := pm["schema"].(map[string]any)
		v, _ := json.Marshal(fuzzValue(rnd, doc, schema, 0))
		sv := strings.Trim(string(v), `"`)
		qs = append(qs, fmt.Sprint(pm["name"])+"="+q(sv))
	}
	if len(qs) > 0 {
		path += "?" + strings.Join(qs, "&")
	}
	var body []byte
	if rb, ok := rt.op["requestBody"].(map[string]any); ok {
		content, _ := rb["content"].(map[string]any)
		for ct, c := range content {
			if ct != "application/json" {
				body = []byte(strings.Repeat("b", rnd.IntN(4096)))
				continue
			}
			cm, _ := c.(map[string]any)
			schema, _ := cm["schema"].(map[string]any)
			body, _ = json.Marshal(fuzzValue(rnd, doc, schema, 0))
		}
	}
	return path, body
}

func ap12Attack(r *run) error {
	routes, doc, err := r.docRoutes()
	if err != nil {
		return err
	}
	id := r.a()
	dur := 8 * time.Second
	if soak() {
		dur = 120 * time.Second
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("SBX_AP12_SEED"), 10, 64); err == nil {
		seed = v // replaying a run's seed (its note names it)
	}
	rnd := rand.New(rand.NewPCG(seed, seed>>7))
	r.note("seed %d, %s", seed, dur)
	logStart := len(r.d.log.String())
	client := &http.Client{Timeout: 30 * time.Second}
	var n, creates int
	skipped := map[string]bool{}
	for end := time.Now().Add(dur); time.Now().Before(end); n++ {
		rt := routes[rnd.IntN(len(routes))]
		if rt.method == "DELETE" && rt.path == "/v1/sandboxes/{id}" {
			continue // keep the fuzz target
		}
		if rt.method == "POST" && rt.path == "/v1/sandboxes" {
			if creates++; creates > 10 {
				continue
			}
		}
		if r.backend == backendLocal && (strings.HasSuffix(rt.path, "/exec") || strings.HasSuffix(rt.path, "/stdin") || runsCommands(rt.path)) {
			skipped[rt.method+" "+rt.path] = true // local runs commands on the host itself
			continue
		}
		path, body := fuzzRequest(rnd, doc, rt, id)
		req, _ := http.NewRequest(rt.method, r.d.url+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+r.d.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			r.breach("AP-12: %s %s %.300s: %v", rt.method, path, body, err)
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		r.record(b)
		// 503 is a refusal to retry; 504 deadline_exceeded is a command that
		// ran out of the time the request itself gave it (sandbox.exec's
		// timeout_ms: 1), the documented answer: neither is a server fault.
		timedOut := resp.StatusCode == 504 && bytes.Contains(b, []byte(`"code":"deadline_exceeded"`))
		if resp.StatusCode >= 500 && resp.StatusCode != 503 && !timedOut {
			r.breach("AP-12: %s %s %s = %d %.300s", rt.method, squeeze(path), squeeze(string(body)), resp.StatusCode, b)
		}
	}
	if strings.Contains(r.d.log.String()[logStart:], "panic") {
		r.breach("AP-12: the daemon's log shows a panic")
	}
	for _, sid := range listIDs(r) {
		if sid != r.env.sibling && !slices.Contains(r.sandboxes, sid) {
			r.sandboxes = append(r.sandboxes, sid)
		}
	}
	r.note("%d requests over %d routes, %d creates", n, len(routes), min(creates, 10))
	if len(skipped) > 0 {
		r.note("not fuzzed on local (commands would run on the host): %v", slices.Sorted(maps.Keys(skipped)))
	}
	r.note("gap: the daemon's goroutines are not visible from outside; fds are audited")
	return nil
}

// runsCommands reports a tool route whose tool runs a program in the
// sandbox (all but the file and env tools, which go through the file API),
// or the route that calls any tool by name: under local those would run on
// the host itself.
func runsCommands(path string) bool {
	_, name, ok := strings.Cut(path, "/tools/")
	if !ok {
		return false
	}
	switch name {
	case "ls", "read_file", "write_file", "edit_file", "glob", "grep",
		"file_read", "file_write", "file_delete", "file_list", "file_search", "env_get", "env_set":
		return false
	}
	return true
}

// squeeze shortens runs of one repeated byte, so a failing fuzz input can be
// printed whole.
func squeeze(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		if j-i > 8 {
			fmt.Fprintf(&b, "%c<×%d>", s[i], j-i)
		} else {
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}
