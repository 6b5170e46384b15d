package sandbox

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"strings"
)

// ID names a sandbox: 26 characters of lower-case base32 (130 random bits), so it
// cannot be guessed and fits E2B's ^[a-z0-9]+$ host-routing alphabet.
type ID string

const idLen = 26

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a fresh random ID.
func NewID() ID {
	var b [17]byte
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return ID(idEncoding.EncodeToString(b[:])[:idLen])
}

// ParseID checks that s has the shape of an ID. A malformed id is reported as not
// found, so the answer says nothing more than an unknown one would.
func ParseID(s string) (ID, error) {
	if len(s) != idLen || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return "", &Error{Op: "lookup", ID: ID(truncate(s, 64)), Err: fmt.Errorf("sandbox %w", ErrNotFound)}
	}
	return ID(s), nil
}

// Short is the first 12 characters, for host resource names with length limits.
func (id ID) Short() string {
	if len(id) < 12 {
		return string(id)
	}
	return string(id[:12])
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
