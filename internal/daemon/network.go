// This file opens the egress path of the allowlist and full tiers.

package daemon

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/config"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/network"
	"sbx.dev/sbx/internal/network/dns"
)

// openNetwork returns the egress path, or nil when the config turns it off.
// Nothing is made on the host before the first networked sandbox.
func openNetwork(cfg config.Config, base *slog.Logger) (*network.Service, error) {
	if cfg.Network.Disabled {
		return nil, nil
	}
	sc := network.ServiceConfig{
		Dir:      filepath.Join(cfg.DataDir, "network"),
		Upstream: dns.NewUpstream(cfg.Network.Nameservers, cfg.Network.HostsFile),
		Log:      base,
	}
	if cfg.Network.Subnet != "" {
		sc.Subnet = netip.MustParsePrefix(cfg.Network.Subnet) // checked by config
	}
	for _, b := range cfg.Network.Block {
		sc.Block = append(sc.Block, netip.MustParsePrefix(b))
	}
	if f := cfg.Network.UpstreamCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("network.upstream_ca_file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("network.upstream_ca_file: %s holds no PEM certificate", f)
		}
		sc.UpstreamRoots = pool
	}
	s, err := network.NewService(sc)
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	return s, nil
}

// backendNetwork and managerNetwork hand the service on as their
// interfaces, nil as nil (not a typed nil).
func backendNetwork(s *network.Service) backend.Network {
	if s == nil {
		return nil
	}
	return s
}

func managerNetwork(s *network.Service) manager.Network {
	if s == nil {
		return nil
	}
	return s
}
