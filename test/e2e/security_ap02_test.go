package e2e

// AP-02 (one key on another key's sandboxes, every route) and AP-04 (token
// scope: E2B access tokens and preview tokens on a sibling or a management
// route; a key without sandbox.exec running a command by every path).

import (
	"encoding/json"
	"fmt"
	"strings"

	"sbx.dev/sbx/internal/server/e2bapi"
)

// newRowKey makes an API key for the row with the admin key and returns its
// secret and id; caps nil is every capability.
func (r *run) newRowKey(name string, caps []string) (secret, id string) {
	r.t.Helper()
	body := map[string]any{"name": name + "-" + randHex(4)}
	if caps != nil {
		body["capabilities"] = caps
	}
	st, b := r.api("POST", "/v1/keys", body)
	var k struct{ ID, Secret string }
	if st != 201 || json.Unmarshal(b, &k) != nil || k.Secret == "" {
		r.t.Fatalf("POST /v1/keys = %d %.200s", st, b)
	}
	return k.Secret, k.ID
}

// e2bToken is sandbox id's E2B access token, as its owner (key) reads it.
func (r *run) e2bToken(key, id string) (string, error) {
	st, _, b := r.call(r.d, key, "GET", "/sandboxes/"+id, nil, map[string]string{"X-API-Key": key})
	var info struct{ EnvdAccessToken string }
	if st != 200 || json.Unmarshal(b, &info) != nil || info.EnvdAccessToken == "" {
		return "", fmt.Errorf("E2B info of %s = %d %.200s", id, st, b)
	}
	return info.EnvdAccessToken, nil
}

// answer is what a refusal says, without the id it names.
type answer struct {
	status int
	code   string
}

func answerOf(st int, b []byte) answer {
	var e errorBody
	json.Unmarshal(b, &e)
	code := e.Error.Code
	if code == "" { // E2B's shape: {"code":404,"message":…}
		var ee struct{ Code any }
		json.Unmarshal(b, &ee)
		code = fmt.Sprint(ee.Code)
	}
	return answer{st, code}
}

// --- AP-02: tenant A's key on tenant B's sandboxes ------------------------------

func ap02Setup(r *run) error {
	ka, _ := r.newRowKey("ap02-a", nil)
	kb, kbID := r.newRowKey("ap02-b", nil)
	a, err := r.createAs(r.d, ka, nil)
	if err != nil {
		return err
	}
	b, err := r.createAs(r.d, kb, nil)
	if err != nil {
		return err
	}
	r.sandboxes = append(r.sandboxes, a, b)
	canary := "b-canary-" + randHex(8)
	if st, _, body := r.call(r.d, kb, "PUT", "/v1/sandboxes/"+b+"/files/write", map[string]any{"path": "canary.txt", "content": canary}, nil); st != 200 {
		return fmt.Errorf("B writing its canary = %d %.200s", st, body)
	}
	r.set("ka", ka)
	r.set("kb", kb)
	r.set("kb_id", kbID)
	r.set("b", b)
	r.set("canary", canary)
	return nil
}

func ap02Control(r *run) error {
	kb, b := r.get("kb"), r.get("b")
	if st, _, body := r.call(r.d, kb, "GET", "/v1/sandboxes/"+b+"/files/read?path=canary.txt", nil, nil); st != 200 || !strings.Contains(string(body), r.get("canary")) {
		return fmt.Errorf("control: B's key reading B's canary = %d %.200s", st, body)
	}
	if res, err := r.execAs(r.d, kb, b, map[string]any{"command": "echo hi"}); err != nil || res.Stdout != "hi\n" {
		return fmt.Errorf("control: B's key running in B: %+v %v", res, err)
	}
	if st, _, body := r.call(r.d, kb, "GET", "/sandboxes/"+b, nil, map[string]string{"X-API-Key": kb}); st != 200 {
		return fmt.Errorf("control: B's key on E2B's get = %d %.200s", st, body)
	}
	return nil
}

func ap02Attack(r *run) error {
	ka, b := r.get("ka"), r.get("b")
	routes, _, err := r.docRoutes()
	if err != nil {
		return err
	}
	fillAll := func(path, id string) string {
		return strings.NewReplacer("{id}", id, "{pid}", "p1", "{port}", "8080", "{name}", "read_file", "{path}", "x").Replace(path)
	}
	n := 0
	for _, rt := range routes {
		if !strings.Contains(rt.path, "{id}") {
			continue
		}
		stB, _, bodyB := r.call(r.d, ka, rt.method, fillAll(rt.path, b), strings.NewReader("{}"), map[string]string{"Content-Type": "application/json"})
		stU, _, bodyU := r.call(r.d, ka, rt.method, fillAll(rt.path, unknownID), strings.NewReader("{}"), map[string]string{"Content-Type": "application/json"})
		n++
		if got, want := answerOf(stB, bodyB), answerOf(stU, bodyU); got != want || stB < 400 {
			r.breach("AP-02: %s %s with A's key on B = %d %.150s; on an unknown id = %d %.150s", rt.method, rt.path, stB, bodyB, stU, bodyU)
		}
	}
	// E2B's control plane, by X-API-Key.
	for _, p := range e2bapi.Patterns() {
		method, path, _ := strings.Cut(p, " ")
		if !strings.Contains(path, "{id}") {
			continue
		}
		e2b := map[string]string{"X-API-Key": ka, "Content-Type": "application/json"}
		stB, _, bodyB := r.call(r.d, ka, method, strings.ReplaceAll(path, "{id}", b), strings.NewReader("{}"), e2b)
		stU, _, bodyU := r.call(r.d, ka, method, strings.ReplaceAll(path, "{id}", unknownID), strings.NewReader("{}"), e2b)
		n++
		if got, want := answerOf(stB, bodyB), answerOf(stU, bodyU); got != want || stB != 404 {
			r.breach("AP-02: E2B %s %s with A's key on B = %d %.150s; on an unknown id = %d %.150s", method, path, stB, bodyB, stU, bodyU)
		}
	}
	// Lists: B's sandbox is in neither of A's.
	for _, l := range []struct{ path, hdr string }{{"/v1/sandboxes", ""}, {"/v2/sandboxes", ka}, {"/sandboxes", ka}} {
		st, _, body := r.call(r.d, ka, "GET", l.path, nil, map[string]string{"X-API-Key": l.hdr})
		n++
		if st != 200 || strings.Contains(string(body), b) {
			r.breach("AP-02: A's list %s = %d and names B: %v", l.path, st, strings.Contains(string(body), b))
		}
	}
	// E2B's data plane: A's own sandbox's token, aimed at B.
	tokA, err := r.e2bToken(ka, r.a())
	if err != nil {
		return err
	}
	for _, rt := range [][2]string{{"GET", "/files?path=/workspace/canary.txt"}, {"POST", "/filesystem.Filesystem/ListDir"}} {
		st, _, body := r.call(r.d, "", rt[0], rt[1], strings.NewReader(`{"path":"/workspace"}`),
			map[string]string{"E2b-Sandbox-Id": b, "E2b-Sandbox-Port": "49983", "X-Access-Token": tokA, "Content-Type": "application/json"})
		n++
		if st != 401 || strings.Contains(string(body), r.get("canary")) {
			r.breach("AP-02: A's E2B token on B's %s = %d %.150s, want 401", rt[1], st, body)
		}
	}
	r.note("%d requests with A's key or token aimed at B: every /v1 route with an id, E2B's control plane, the lists, E2B's data plane", n)
	return nil
}

func ap02Evidence(r *run) error {
	kb, b := r.get("kb"), r.get("b")
	if st, _, body := r.call(r.d, kb, "GET", "/v1/sandboxes/"+b+"/files/read?path=canary.txt", nil, nil); st != 200 || !strings.Contains(string(body), r.get("canary")) {
		r.breach("AP-02: B's canary changed or B is gone: %d %.200s", st, body)
	}
	// Nothing A tried on B succeeded, by B's audit.
	st, body := r.api("GET", "/v1/audit?sandbox_id="+b+"&limit=1000", nil)
	var recs struct {
		Records []struct {
			KeyID   string `json:"key_id"`
			Action  string `json:"action"`
			Outcome string `json:"outcome"`
		} `json:"records"`
	}
	if st != 200 || json.Unmarshal(body, &recs) != nil {
		return fmt.Errorf("B's audit = %d %.200s", st, body)
	}
	for _, rec := range recs.Records {
		if rec.KeyID != r.get("kb_id") && rec.Outcome == "ok" {
			r.breach("AP-02: B's audit has %s by key %s, ok", rec.Action, rec.KeyID)
		}
	}
	return nil
}

// --- AP-04: token scope, and a key without sandbox.exec --------------------------

func ap04Setup(r *run) error {
	k, _ := r.newRowKey("ap04-files-only", []string{"tools.files"})
	s, err := r.createAs(r.d, k, nil)
	if err != nil {
		return err
	}
	r.sandboxes = append(r.sandboxes, s)
	t := r.create(nil) // the admin key's: the sibling the tokens aim at
	tok, err := r.e2bToken(k, s)
	if err != nil {
		return err
	}
	st, b := r.api("GET", "/v1/sandboxes/"+s+"/ports/8080/url", nil)
	var pv struct{ Token string }
	if st != 200 || json.Unmarshal(b, &pv) != nil || pv.Token == "" {
		return fmt.Errorf("S's preview token = %d %.200s", st, b)
	}
	r.set("k", k)
	r.set("s", s)
	r.set("t", t)
	r.set("tok", tok)
	r.set("preview", pv.Token)
	return nil
}

func ap04Control(r *run) error {
	k, s, t := r.get("k"), r.get("s"), r.get("t")
	st, _, b := r.call(r.d, k, "PUT", "/v1/sandboxes/"+s+"/files/write", map[string]any{"path": "f.txt", "content": "x"}, nil)
	var fi struct{ Path string }
	if st != 200 || json.Unmarshal(b, &fi) != nil || fi.Path == "" {
		return fmt.Errorf("control: the files-only key writing a file = %d %.200s", st, b)
	}
	hdr := map[string]string{"E2b-Sandbox-Id": s, "E2b-Sandbox-Port": "49983", "X-Access-Token": r.get("tok")}
	if st, _, b := r.call(r.d, "", "GET", "/files?path="+q(fi.Path), nil, hdr); st != 200 || string(b) != "x" {
		return fmt.Errorf("control: S's token reading S's file = %d %.200s", st, b)
	}
	if res := r.sh(t, "echo ok"); res.Stdout != "ok\n" {
		return fmt.Errorf("control: the admin key running in T: %+v", res)
	}
	return nil
}

func ap04Attack(r *run) error {
	k, s, t, tok := r.get("k"), r.get("s"), r.get("t"), r.get("tok")
	denied := func(what string, st int, b []byte) {
		if st != 403 || !strings.Contains(string(b), "access denied: sandbox.exec") {
			r.breach("AP-04: %s without sandbox.exec = %d %.200s, want 403 access denied: sandbox.exec", what, st, b)
		}
	}
	// A key without sandbox.exec runs nothing, by any path.
	st, _, b := r.call(r.d, k, "POST", "/v1/sandboxes/"+s+"/exec", map[string]any{"command": "touch ran"}, nil)
	denied("POST /exec", st, b)
	st, _, b = r.call(r.d, k, "POST", "/v1/sandboxes/"+s+"/tools/exec_command", map[string]any{"cmd": "touch ran"}, nil)
	if st != 403 {
		r.breach("AP-04: the exec_command tool without its capability = %d %.200s", st, b)
	}
	hdr := map[string]string{"E2b-Sandbox-Id": s, "E2b-Sandbox-Port": "49983", "X-Access-Token": tok, "Content-Type": "application/connect+json"}
	start := `{"process":{"cmd":"/bin/sh","args":["-c","touch ran"]}}`
	env := append([]byte{0, 0, 0, 0, byte(len(start))}, start...)
	st, _, b = r.call(r.d, "", "POST", "/process.Process/Start", strings.NewReader(string(env)), hdr)
	if st != 200 || !strings.Contains(string(b), "permission_denied") || !strings.Contains(string(b), "sandbox.exec") {
		r.breach("AP-04: E2B Start with the token of a key without sandbox.exec = %d %q, want the stream's permission_denied", st, b)
	}
	// S's E2B token on the sibling T, and on management routes.
	st, _, b = r.call(r.d, "", "GET", "/files?path=/workspace", nil, map[string]string{"E2b-Sandbox-Id": t, "E2b-Sandbox-Port": "49983", "X-Access-Token": tok})
	if st != 401 {
		r.breach("AP-04: S's E2B token on T's files = %d %.150s, want 401", st, b)
	}
	for _, tokName := range []string{"tok", "preview"} {
		v := r.get(tokName)
		for _, rt := range [][2]string{{"GET", "/v1/sandboxes"}, {"GET", "/v1/sandboxes/" + s}, {"POST", "/v1/keys"}, {"GET", "/v1/audit"}} {
			st, _, b := r.call(r.d, v, rt[0], rt[1], map[string]any{"name": "x"}, nil)
			if st != 401 {
				r.breach("AP-04: the %s token as an API key on %s %s = %d %.150s, want 401", tokName, rt[0], rt[1], st, b)
			}
		}
		st, _, b := r.call(r.d, "", "GET", "/v2/sandboxes", nil, map[string]string{"X-API-Key": v})
		if st != 401 {
			r.breach("AP-04: the %s token as E2B's X-API-Key = %d %.150s, want 401", tokName, st, b)
		}
	}
	// S's preview token on T's port (nothing listens: the answer must be the
	// token's refusal, not a dial).
	st, _, b = r.call(r.d, "", "GET", "/v1/sandboxes/"+t+"/proxy/8080/", nil, map[string]string{"X-Sbx-Preview-Token": r.get("preview")})
	if st != 401 && st != 403 && st != 404 {
		r.breach("AP-04: S's preview token on T's port = %d %.150s, want 401, 403 or 404", st, b)
	}
	// And the E2B token is no preview token.
	st, _, b = r.call(r.d, "", "GET", "/v1/sandboxes/"+s+"/proxy/8080/", nil, map[string]string{"X-Sbx-Preview-Token": tok})
	if st != 401 && st != 403 && st != 404 {
		r.breach("AP-04: S's E2B token as S's preview token = %d %.150s", st, b)
	}
	return nil
}

func ap04Evidence(r *run) error {
	res := r.sh(r.get("s"), "test -e ran && echo ran || echo clean")
	if res.Stdout != "clean\n" {
		r.breach("AP-04: a command ran in S for the key without sandbox.exec: %+v", res)
	}
	return nil
}
