package secrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newBox(t *testing.T) *Box {
	t.Helper()
	key := bytes.Repeat([]byte{7}, KeyBytes)
	b, err := NewBox(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSealOpen(t *testing.T) {
	b := newBox(t)
	value := []byte("tok-3f9a1c")
	ct, nonce, err := b.Seal("key_a", "api", value)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ct, value) {
		t.Errorf("the ciphertext holds the value")
	}
	got, err := b.Open("key_a", "api", ct, nonce)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Open = %q, %v; want %q", got, err, value)
	}
	// A fresh nonce for every value: the same value seals differently.
	ct2, nonce2, _ := b.Seal("key_a", "api", value)
	if bytes.Equal(nonce, nonce2) || bytes.Equal(ct, ct2) {
		t.Errorf("two seals of one value share a nonce or a ciphertext")
	}
	// The largest value goes; one byte more does not.
	big := bytes.Repeat([]byte{'x'}, MaxValueBytes)
	if ct, nonce, err := b.Seal("key_a", "big", big); err != nil {
		t.Errorf("Seal(%d bytes) = %v", len(big), err)
	} else if got, err := b.Open("key_a", "big", ct, nonce); err != nil || !bytes.Equal(got, big) {
		t.Errorf("Open(%d bytes) = %d bytes, %v", len(big), len(got), err)
	}
	if _, _, err := b.Seal("key_a", "big", append(big, 'x')); err == nil {
		t.Errorf("Seal(%d bytes) succeeded", len(big)+1)
	}
}

// A sealed value opens only for its owner and name, under its key, unaltered.
func TestOpenRefuses(t *testing.T) {
	b := newBox(t)
	value := []byte("tok-3f9a1c")
	ct, nonce, _ := b.Seal("key_a", "api", value)
	other, _ := NewBox(bytes.Repeat([]byte{8}, KeyBytes))
	flip := func(p []byte, i int) []byte {
		q := bytes.Clone(p)
		q[i] ^= 1
		return q
	}
	for _, tc := range []struct {
		name       string
		box        *Box
		owner, sec string
		ct, nonce  []byte
	}{
		{"another owner", b, "key_b", "api", ct, nonce},
		{"another name", b, "key_a", "api2", ct, nonce},
		{"owner and name shifted", b, "key_aa", "pi", ct, nonce},
		{"another key", other, "key_a", "api", ct, nonce},
		{"a ciphertext byte changed", b, "key_a", "api", flip(ct, 0), nonce},
		{"the tag changed", b, "key_a", "api", flip(ct, len(ct)-1), nonce},
		{"the nonce changed", b, "key_a", "api", ct, flip(nonce, 3)},
		{"the nonce cut", b, "key_a", "api", ct, nonce[:4]},
		{"the ciphertext cut", b, "key_a", "api", ct[:len(ct)-1], nonce},
	} {
		got, err := tc.box.Open(tc.owner, tc.sec, tc.ct, tc.nonce)
		if !errors.Is(err, ErrOpen) || got != nil {
			t.Errorf("%s: Open = %q, %v; want ErrOpen", tc.name, got, err)
		}
		if err != nil && strings.Contains(err.Error(), string(value)) {
			t.Errorf("%s: the error holds the value: %v", tc.name, err)
		}
	}
	if _, err := NewBox(make([]byte, 16)); err == nil {
		t.Errorf("NewBox(16 bytes) succeeded; want only %d-byte keys", KeyBytes)
	}
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KeyFile)
	key, created, err := LoadKey(path)
	if err != nil || !created || len(key) != KeyBytes {
		t.Fatalf("LoadKey(new) = %d bytes, created %v, %v", len(key), created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != KeyBytes {
		t.Fatalf("the key file: %v, %v", fi, err)
	}
	again, created, err := LoadKey(path)
	if err != nil || created || !bytes.Equal(again, key) {
		t.Fatalf("LoadKey(existing) = created %v, %v; same key %v", created, err, bytes.Equal(again, key))
	}
	// A narrower mode is fine.
	os.Chmod(path, 0o400)
	if _, _, err := LoadKey(path); err != nil {
		t.Errorf("LoadKey(mode 0400) = %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A key file that is wrong is refused, saying why, and never replaced.
func TestLoadKeyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(path string)
		want  string
	}{
		{"readable by the group", func(p string) { os.WriteFile(p, make([]byte, KeyBytes), 0o600); os.Chmod(p, 0o640) }, "mode 0640"},
		{"readable by all", func(p string) { os.WriteFile(p, make([]byte, KeyBytes), 0o600); os.Chmod(p, 0o644) }, "mode 0644"},
		{"executable", func(p string) { os.WriteFile(p, make([]byte, KeyBytes), 0o600); os.Chmod(p, 0o700) }, "mode 0700"},
		{"too short", func(p string) { os.WriteFile(p, make([]byte, KeyBytes-1), 0o600) }, "holds 31 bytes, want 32"},
		{"too long", func(p string) { os.WriteFile(p, make([]byte, KeyBytes+1), 0o600) }, "holds 33 bytes, want 32"},
		{"hex, not raw", func(p string) { os.WriteFile(p, bytes.Repeat([]byte("ab"), KeyBytes), 0o600) }, "holds 64 bytes"},
		{"empty", func(p string) { os.WriteFile(p, nil, 0o600) }, "holds 0 bytes"},
		{"a directory", func(p string) { os.Mkdir(p, 0o700) }, "not a regular file"},
		{"a symbolic link", func(p string) {
			os.WriteFile(p+".real", make([]byte, KeyBytes), 0o600)
			os.Symlink(p+".real", p)
		}, "symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), KeyFile)
			tc.setup(path)
			before, _ := os.Lstat(path)
			key, created, err := LoadKey(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) || key != nil || created {
				t.Errorf("LoadKey = %d bytes, created %v, %v; want an error naming the file and saying %q", len(key), created, err, tc.want)
			}
			after, _ := os.Lstat(path)
			if before == nil || after == nil || before.Mode() != after.Mode() || before.Size() != after.Size() || !before.ModTime().Equal(after.ModTime()) {
				t.Errorf("the refused file changed: %v → %v", before, after)
			}
		})
	}
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true}, {"my-api-key", true}, {"A.b_c-9", true}, {strings.Repeat("n", MaxNameBytes), true},
		{"", false}, {strings.Repeat("n", MaxNameBytes+1), false}, {"a b", false}, {"a/b", false},
		{"{{secret:x}}", false}, {"é", false}, {"a\x00", false},
	} {
		if err := CheckName(tc.name); (err == nil) != tc.ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	for _, tc := range []struct {
		mode string
		ok   bool
	}{{ModeEnv, true}, {ModeProxy, true}, {"", false}, {"ENV", false}, {"header", false}} {
		if err := CheckMode(tc.mode); (err == nil) != tc.ok {
			t.Errorf("CheckMode(%q) = %v, want ok %v", tc.mode, err, tc.ok)
		}
	}
	for _, tc := range []struct {
		mode  string
		value string
		want  string // "" is ok
	}{
		{ModeEnv, "v", ""},
		{ModeEnv, "line1\nline2", ""},
		{ModeProxy, "Bearer tok", ""},
		{ModeEnv, "", "empty"},
		{ModeEnv, strings.Repeat("v", MaxValueBytes+1), "at most 65536"},
		{ModeEnv, "a\x00b", "NUL"},
		{ModeProxy, "tok\r\nX-Evil: 1", "CR or LF"},
		{ModeProxy, "tok\n", "CR or LF"},
	} {
		err := CheckValue(tc.mode, []byte(tc.value))
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckValue(%s, %.20q) = %v, want %q", tc.mode, tc.value, err, tc.want)
		}
		if err != nil && len(tc.value) > 2 && strings.Contains(err.Error(), tc.value) {
			t.Errorf("CheckValue's error holds the value: %v", err)
		}
	}
}
