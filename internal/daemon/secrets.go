// This file opens the daemon's secret store: the key in the data directory
// that seals every secret's value, and the egress proxy's side of proxy-mode
// secrets.

package daemon

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/network"
	"sbx.dev/sbx/internal/secrets"
)

// openSecretBox returns the box over <dir>/secrets.key, making the key on
// the first start. A key file that is wrong (mode wider than 0600, wrong
// size) stops the daemon, saying why: replacing it would lose every secret.
func openSecretBox(dir string, log *slog.Logger) (*secrets.Box, error) {
	path := filepath.Join(dir, secrets.KeyFile)
	key, created, err := secrets.LoadKey(path)
	if err != nil {
		return nil, err
	}
	if created {
		log.Info("created the secrets key", logkey.Path, path)
	}
	box, err := secrets.NewBox(key)
	if err != nil {
		return nil, fmt.Errorf("the secrets key %s: %w", path, err)
	}
	return box, nil
}

var _ manager.ProxySecrets = (*network.Service)(nil)

// proxySecrets hands on the egress path as the manager's ProxySecrets, nil
// as nil (not a typed nil): without it the manager refuses proxy-mode
// secrets.
func proxySecrets(s *network.Service) manager.ProxySecrets {
	if s == nil {
		return nil
	}
	return s
}
