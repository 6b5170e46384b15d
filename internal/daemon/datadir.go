// This file implements what the daemon keeps in its data directory beside the
// store: the lock, the admin key file and the instance name.

package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/store"
)

// lockDataDir takes an exclusive lock on <dir>/sbx.lock for the daemon's life:
// one daemon per data directory. The kernel drops it if the process dies.
func lockDataDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "sbx.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is in use by another sbx serve (lock %s is held)", dir, path)
		}
		return nil, fmt.Errorf("locking data directory %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "%d\n", os.Getpid())
	}
	return func() { f.Close() }, nil
}

const adminKeyName = store.AdminKeyName

// ensureAdminKey makes <dir>/admin.key hold the secret of a valid key named
// admin, whose hash alone is in the store. When the file and the store disagree
// (either lost), both are recreated and the old admin keys revoked.
func ensureAdminKey(ctx context.Context, st *store.Store, dir string, log *slog.Logger) (string, error) {
	path := filepath.Join(dir, "admin.key")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		k, lerr := st.LookupKey(ctx, strings.TrimSpace(string(b)))
		if lerr == nil && k.Name == adminKeyName {
			if err := os.Chmod(path, 0o600); err != nil {
				return "", fmt.Errorf("securing admin key file: %w", err)
			}
			return path, nil
		}
		if lerr != nil && !errors.Is(lerr, sandbox.ErrNotFound) {
			return "", lerr
		}
		log.Warn("admin.key does not match the store; creating a new admin key", logkey.Path, path)
	case errors.Is(err, os.ErrNotExist):
	default:
		return "", fmt.Errorf("reading admin key file: %w", err)
	}

	keys, err := st.ListKeys(ctx)
	if err != nil {
		return "", err
	}
	for _, k := range keys {
		if k.Name == adminKeyName && k.RevokedAt.IsZero() {
			if err := st.RevokeKey(ctx, k.ID); err != nil {
				return "", err
			}
			log.Info("revoked an admin key whose secret is lost", logkey.KeyID, k.ID)
		}
	}
	secret, k, err := st.CreateKey(ctx, adminKeyName)
	if err != nil {
		return "", err
	}
	if err := writeFile0600(path, secret+"\n"); err != nil {
		return "", fmt.Errorf("writing admin key file: %w", err)
	}
	log.Info("created the admin API key", logkey.KeyID, k.ID, logkey.Path, path)
	return path, nil
}

// ensureInstance returns the daemon instance's short name, created once and kept
// in <dir>/instance: every host resource a driver creates carries it.
func ensureInstance(dir string) (string, error) {
	path := filepath.Join(dir, "instance")
	b, err := os.ReadFile(path)
	if err == nil {
		if s := strings.TrimSpace(string(b)); validInstance(s) {
			return s, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading instance name: %w", err)
	}
	var r [4]byte
	rand.Read(r[:])
	name := hex.EncodeToString(r[:])
	if err := writeFile0600(path, name+"\n"); err != nil {
		return "", fmt.Errorf("writing instance name: %w", err)
	}
	return name, nil
}

func validInstance(s string) bool {
	if len(s) == 0 || len(s) > 16 {
		return false
	}
	return strings.Trim(s, "0123456789abcdefghijklmnopqrstuvwxyz") == ""
}

// writeFile0600 writes path atomically (temp file, fsync, rename), mode 0600.
func writeFile0600(path, content string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, a no-op
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
