package store

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

func sealed(owner, name, mode string, hosts []string, at int64) Secret {
	return Secret{Owner: owner, Name: name, Mode: mode, Hosts: hosts,
		Ciphertext: []byte("ct-" + owner + "-" + name), Nonce: []byte("nonce-123456"),
		CreatedAt: time.UnixMilli(at), UpdatedAt: time.UnixMilli(at)}
}

func TestSecretRoundTrip(t *testing.T) {
	s, path := openTemp(t)
	ctx := t.Context()
	a := sealed("key_a", "api", "proxy", []string{"api.example.com", "*.example.org"}, 1_700_000_000_000)
	got, replaced, err := s.PutSecret(ctx, a)
	if err != nil || replaced || !reflect.DeepEqual(got, a) {
		t.Fatalf("PutSecret(new) = %+v, %v, %v; want %+v, false", got, replaced, err, a)
	}
	env := sealed("key_a", "db", "env", nil, 1_700_000_000_500)
	if _, _, err := s.PutSecret(ctx, env); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSecret(ctx, "key_a", "api"); err != nil || !reflect.DeepEqual(got, a) {
		t.Errorf("GetSecret = %+v, %v; want %+v", got, err, a)
	}

	// Replacing keeps created_at and changes the rest.
	b := sealed("key_a", "api", "env", nil, 1_700_000_009_000)
	b.Ciphertext, b.Nonce = []byte("new ciphertext"), []byte("new-nonce-12")
	got, replaced, err = s.PutSecret(ctx, b)
	want := b
	want.CreatedAt = a.CreatedAt
	if err != nil || !replaced || !reflect.DeepEqual(got, want) {
		t.Fatalf("PutSecret(replace) = %+v, %v, %v; want %+v, true", got, replaced, err, want)
	}
	if got, err := s.GetSecret(ctx, "key_a", "api"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("GetSecret after replace = %+v, %v; want %+v", got, err, want)
	}

	// The list is by name, without sealed values.
	list, err := s.ListSecrets(ctx, "key_a")
	if err != nil || len(list) != 2 || list[0].Name != "api" || list[1].Name != "db" {
		t.Fatalf("ListSecrets = %+v, %v", list, err)
	}
	for _, l := range list {
		if l.Ciphertext != nil || l.Nonce != nil || l.Owner != "key_a" {
			t.Errorf("ListSecrets holds %+v; want no sealed value", l)
		}
	}

	// It outlives a reopen.
	s.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := s2.GetSecret(ctx, "key_a", "db"); err != nil || !reflect.DeepEqual(got, env) {
		t.Errorf("GetSecret after reopen = %+v, %v; want %+v", got, err, env)
	}
	s2.Close()
	raw, _ := os.ReadFile(path)
	if !bytes.Contains(raw, []byte("new ciphertext")) {
		t.Errorf("control: the store file does not hold the sealed value")
	}
}

// Names are unique per owner, not across owners: each key has its own.
func TestSecretScope(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	for _, sec := range []Secret{sealed("key_a", "api", "env", nil, 1), sealed("key_b", "api", "env", nil, 2)} {
		if _, replaced, err := s.PutSecret(ctx, sec); err != nil || replaced {
			t.Fatalf("PutSecret(%s/%s) = %v, replaced %v", sec.Owner, sec.Name, err, replaced)
		}
	}
	for _, owner := range []string{"key_a", "key_b"} {
		got, err := s.GetSecret(ctx, owner, "api")
		if err != nil || string(got.Ciphertext) != "ct-"+owner+"-api" {
			t.Errorf("GetSecret(%s) = %q, %v", owner, got.Ciphertext, err)
		}
		if l, _ := s.ListSecrets(ctx, owner); len(l) != 1 {
			t.Errorf("ListSecrets(%s) = %+v, want its one", owner, l)
		}
	}
	// Another key's name is not found, as an unknown one is.
	_, foreign := s.GetSecret(ctx, "key_c", "api")
	_, unknown := s.GetSecret(ctx, "key_c", "nope")
	if !errors.Is(foreign, sandbox.ErrNotFound) || !errors.Is(unknown, sandbox.ErrNotFound) {
		t.Errorf("GetSecret(foreign) = %v, GetSecret(unknown) = %v; want not found", foreign, unknown)
	}
	if l, err := s.ListSecrets(ctx, "key_c"); err != nil || len(l) != 0 {
		t.Errorf("ListSecrets(key_c) = %+v, %v; want none", l, err)
	}
	if err := s.DeleteSecret(ctx, "key_c", "api"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("DeleteSecret(another key's) = %v, want not found", err)
	}
}

func TestSecretDelete(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	for _, sec := range []Secret{sealed("key_a", "api", "env", nil, 1), sealed("key_b", "api", "env", nil, 1)} {
		s.PutSecret(ctx, sec)
	}
	if err := s.DeleteSecret(ctx, "key_a", "api"); err != nil {
		t.Fatalf("DeleteSecret = %v", err)
	}
	if err := s.DeleteSecret(ctx, "key_a", "api"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("DeleteSecret twice = %v, want not found", err)
	}
	if _, err := s.GetSecret(ctx, "key_a", "api"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("GetSecret after delete = %v, want not found", err)
	}
	if _, err := s.GetSecret(ctx, "key_b", "api"); err != nil {
		t.Errorf("the other key's secret of that name went too: %v", err)
	}
}

// The table refuses what the rules refuse, whoever calls.
func TestSecretConstraints(t *testing.T) {
	s, _ := openTemp(t)
	for _, sec := range []Secret{
		sealed("key_a", "", "env", nil, 1),
		sealed("key_a", "a b", "env", nil, 1),
		sealed("key_a", "a/b", "env", nil, 1),
		sealed("key_a", string(bytes.Repeat([]byte("n"), 129)), "env", nil, 1),
		sealed("key_a", "ok", "header", nil, 1),
	} {
		if _, _, err := s.PutSecret(t.Context(), sec); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("PutSecret(name %.20q, mode %q) = %v, want invalid", sec.Name, sec.Mode, err)
		}
	}
	for _, name := range []string{"a", "A.b_c-9", string(bytes.Repeat([]byte("n"), 128))} {
		if _, _, err := s.PutSecret(t.Context(), sealed("key_a", name, "env", nil, 1)); err != nil {
			t.Errorf("PutSecret(name %.20q) = %v", name, err)
		}
	}
}
