// This file connects a sandbox's network namespace to the daemon's egress
// path (backend.Network) for the allowlist and full tiers.

package native

import (
	"context"
	"fmt"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/isolation/mount"
	"sbx.dev/sbx/internal/sandbox"
)

// proxyEnv is the environment of a networked sandbox's processes: programs
// that honour HTTP(S)_PROXY talk to the gateway's proxy port; the others are
// redirected there all the same.
func proxyEnv(n backend.Network) []string {
	u := "http://" + n.Gateway().String() + ":3128"
	noProxy := "localhost,127.0.0.1,::1"
	// Programs with trust stores of their own (node, pip's and requests'
	// certifi) are pointed at the one that holds the proxy's CA.
	const bundle = "/etc/ssl/certs/ca-certificates.crt"
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		"NODE_EXTRA_CA_CERTS=" + mount.EgressCAFile, "REQUESTS_CA_BUNDLE=" + bundle, "SSL_CERT_FILE=" + bundle, "PIP_CERT=" + bundle}
}

// resolvConf is the sandboxes' /etc/resolv.conf: the gateway's resolver.
func resolvConf(n backend.Network) string {
	return "nameserver " + n.Gateway().String() + "\noptions edns0 trust-ad\n"
}

// networked says whether tier reaches beyond loopback.
func networked(tier sandbox.Network) bool {
	return tier == sandbox.NetworkAllowlist || tier == sandbox.NetworkFull
}

// checkNetwork refuses a tier this driver cannot give.
func (d *Driver) checkNetwork(tier sandbox.Network) error {
	switch {
	case tier == "" || tier == sandbox.NetworkNone:
		return nil
	case !networked(tier):
		return fmt.Errorf("%w: network %q: the native backend offers none, allowlist and full", sandbox.ErrInvalid, tier)
	case d.opts.Network == nil:
		return fmt.Errorf("%w: network %q: this daemon runs without its egress network (see [network] in the config)", sandbox.ErrInvalid, tier)
	}
	return nil
}

// connect attaches b to the egress path.
func (d *Driver) connect(ctx context.Context, b *box) error {
	if !b.proc.Held() || b.proc.PidFD == nil {
		return fmt.Errorf("sandbox %s has no running init", b.id)
	}
	ns, err := openNetNS(b.proc)
	if err != nil {
		return err
	}
	defer ns.Close()
	_, err = d.opts.Network.Attach(ctx, b.id, ns)
	return err
}

// SetNetwork implements backend.NetworkSetter.
func (d *Driver) SetNetwork(ctx context.Context, id sandbox.ID, tier sandbox.Network) error {
	if err := d.checkNetwork(tier); err != nil {
		return &sandbox.Error{Op: "set network", ID: id, Err: err}
	}
	b, ok, err := d.lookup("set network", id)
	if err != nil {
		return err
	}
	if !ok {
		return &sandbox.Error{Op: "set network", ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	if !networked(tier) {
		if d.opts.Network == nil {
			return nil
		}
		return d.opts.Network.Detach(ctx, id)
	}
	return d.connect(ctx, b)
}
