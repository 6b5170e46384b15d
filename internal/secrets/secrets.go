// Package secrets seals the values of the daemon's secret store at rest:
// AES-256-GCM under one 32-byte key kept in the data directory's secrets.key,
// a fresh random nonce per value, and additional data binding each sealed
// value to its owner and name, so a row copied under another name or owner
// does not open. It also holds the rules of a secret's name, mode and value.
// It is pure logic: it knows nothing of the store, sandboxes or the wire, and
// never puts a value in an error.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

const (
	// KeyFile is the key's file name in the daemon's data directory.
	KeyFile = "secrets.key"
	// KeyBytes is the size of the key, and of its file: raw bytes.
	KeyBytes = 32
	// MaxValueBytes bounds a secret's value.
	MaxValueBytes = 64 << 10
	// MaxNameBytes bounds a secret's name.
	MaxNameBytes = 128
)

// The modes of a secret.
const (
	// ModeEnv puts the value itself in the process's environment.
	ModeEnv = "env"
	// ModeProxy puts a placeholder there; the egress proxy swaps the value in
	// for requests to the secret's hosts.
	ModeProxy = "proxy"
)

// CheckName reports whether name may name a secret: 1 to MaxNameBytes of
// A-Z, a-z, 0-9, '.', '_' and '-'. The error says why without repeating
// more of name than a caller can read in a line.
func CheckName(name string) error {
	if name == "" {
		return errors.New("empty")
	}
	if len(name) > MaxNameBytes {
		return fmt.Errorf("%d bytes, at most %d", len(name), MaxNameBytes)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("%q: byte %d (0x%02x) is not one of A-Z a-z 0-9 . _ -", name, i, c)
		}
	}
	return nil
}

// CheckMode reports whether mode is ModeEnv or ModeProxy.
func CheckMode(mode string) error {
	if mode != ModeEnv && mode != ModeProxy {
		return fmt.Errorf("%q is not %s or %s", clip(mode, 40), ModeEnv, ModeProxy)
	}
	return nil
}

// CheckValue reports whether value may be a secret's value in mode: not
// empty, at most MaxValueBytes, no NUL byte (neither an environment variable
// nor a header can carry one), and in proxy mode no CR or LF (the proxy
// writes it into a header line). The error never holds the value.
func CheckValue(mode string, value []byte) error {
	switch {
	case len(value) == 0:
		return errors.New("empty")
	case len(value) > MaxValueBytes:
		return fmt.Errorf("%d bytes, at most %d", len(value), MaxValueBytes)
	}
	for _, c := range value {
		switch {
		case c == 0:
			return errors.New("contains a NUL byte, which no environment variable or header can carry")
		case mode == ModeProxy && (c == '\r' || c == '\n'):
			return errors.New("contains CR or LF, which a proxy-mode value cannot: it is written into a header line")
		}
	}
	return nil
}

// ErrOpen is the error of a sealed value that does not open: sealed under
// another key, for another owner or name, or altered.
var ErrOpen = errors.New("the sealed value does not open with this key (another key, another owner or name, or altered)")

// Box seals and opens values under one key; it is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// NewBox returns a Box over key, which must be KeyBytes long.
func NewBox(key []byte) (*Box, error) {
	if len(key) != KeyBytes {
		return nil, fmt.Errorf("secrets key: %d bytes, want %d", len(key), KeyBytes)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts value for owner's secret name under a fresh random nonce
// and returns the ciphertext (with its tag) and the nonce. Only Open with
// the same owner and name gives value back.
func (b *Box) Seal(owner, name string, value []byte) (ciphertext, nonce []byte, err error) {
	if len(value) > MaxValueBytes {
		return nil, nil, fmt.Errorf("sealing: %d bytes, at most %d", len(value), MaxValueBytes)
	}
	nonce = make([]byte, b.aead.NonceSize())
	rand.Read(nonce) // never fails (crypto/rand panics instead)
	return b.aead.Seal(nil, nonce, value, additional(owner, name)), nonce, nil
}

// Open decrypts what Seal made for owner's secret name. Any mismatch (key,
// owner, name, nonce, a changed byte) fails with ErrOpen.
func (b *Box) Open(owner, name string, ciphertext, nonce []byte) ([]byte, error) {
	if len(nonce) != b.aead.NonceSize() {
		return nil, ErrOpen
	}
	v, err := b.aead.Open(nil, nonce, ciphertext, additional(owner, name))
	if err != nil {
		return nil, ErrOpen
	}
	return v, nil
}

// additional is the additional data of owner's secret name: a version tag
// and both strings, each after its length, so no two pairs share a form.
func additional(owner, name string) []byte {
	const tag = "sbx-secret-v1"
	b := make([]byte, 0, len(tag)+8+len(owner)+len(name))
	b = append(b, tag...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(owner)))
	b = append(b, owner...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	return append(b, name...)
}

// LoadKey returns the key in the file at path, making it (KeyBytes random
// bytes, mode 0600) when there is none; created says it was made. An
// existing file is refused, saying why, when it is not a regular file, when
// its mode grants anything beyond 0600, or when it is not KeyBytes long: it
// is never replaced, since every value sealed under the old key would be
// lost with it.
func LoadKey(path string) (key []byte, created bool, err error) {
	key, err = readKey(path)
	if !errors.Is(err, os.ErrNotExist) {
		return key, false, err
	}
	key = make([]byte, KeyBytes)
	rand.Read(key)
	if err := createKey(path, key); err != nil {
		if errors.Is(err, os.ErrExist) { // made meanwhile by another: use it
			key, err = readKey(path)
			return key, false, err
		}
		return nil, false, fmt.Errorf("creating the secrets key %s: %w", path, err)
	}
	return key, true, nil
}

func readKey(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("the secrets key %s is a symbolic link; it must be a regular file", path)
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("reading the secrets key %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the secrets key %s: %w", path, err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("the secrets key %s is not a regular file (%s)", path, fi.Mode().Type())
	case fi.Mode().Perm()&^0o600 != 0:
		return nil, fmt.Errorf("the secrets key %s has mode %04o, which lets others read it; it must be 0600 or narrower (chmod 600 %s)",
			path, fi.Mode().Perm(), path)
	case fi.Size() != KeyBytes:
		return nil, fmt.Errorf("the secrets key %s holds %d bytes, want %d: it is not a key sbx made; restore the right file "+
			"(the secrets sealed under the lost key cannot be opened; remove the file and sbx makes a new key for new secrets)",
			path, fi.Size(), KeyBytes)
	}
	key := make([]byte, KeyBytes+1) // one more, to see a file that grew meanwhile
	n, err := f.ReadAt(key, 0)
	if n != KeyBytes {
		return nil, fmt.Errorf("reading the secrets key %s: read %d bytes, want %d (%v)", path, n, KeyBytes, err)
	}
	return key[:KeyBytes], nil
}

// createKey writes key to path, mode 0600, all or nothing: a temporary file
// in the same directory, synced, then linked at path, which fails with
// os.ErrExist when path appeared meanwhile.
func createKey(path string, key []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(key); err != nil {
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
	if err := os.Link(f.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
