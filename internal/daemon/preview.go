// This file implements the preview secret the daemon keeps in its data
// directory: the key of every sandbox's preview token.

package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
)

// ensurePreviewKey returns the secret in <dir>/preview.key (hex, mode 0600),
// making it on the first start: tokens handed out stay valid across
// restarts. A file that holds no secret is replaced, with a warning: the
// tokens it signed stop working.
func ensurePreviewKey(dir string, log *slog.Logger) ([]byte, error) {
	path := filepath.Join(dir, "preview.key")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		secret, derr := hex.DecodeString(strings.TrimSpace(string(b)))
		if derr == nil && len(secret) == manager.PreviewSecretBytes {
			if err := os.Chmod(path, 0o600); err != nil {
				return nil, fmt.Errorf("securing the preview key file: %w", err)
			}
			return secret, nil
		}
		log.Warn("preview.key holds no preview secret; making a new one (preview tokens handed out before stop working)", logkey.Path, path)
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("reading the preview key file: %w", err)
	}
	secret := make([]byte, manager.PreviewSecretBytes)
	rand.Read(secret)
	if err := writeFile0600(path, hex.EncodeToString(secret)+"\n"); err != nil {
		return nil, fmt.Errorf("writing the preview key file: %w", err)
	}
	return secret, nil
}
