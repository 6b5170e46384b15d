package network

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"sbx.dev/sbx/internal/network/rules"
	"sbx.dev/sbx/internal/sandbox"
)

// placeholderPrefix starts every placeholder; the rest is 32 random hex
// digits, so a placeholder is unguessable and found by one pattern.
const placeholderPrefix = "sbx-secret-"

var placeholderRE = regexp.MustCompile(placeholderPrefix + `[0-9a-f]{32}`)

// proxySecret is one proxy-mode secret of one sandbox.
type proxySecret struct {
	sandbox sandbox.ID
	name    string
	value   string
	hosts   *rules.Set // an allowlist of the hosts it may be sent to
}

// secretBook holds the sandboxes' proxy-mode secrets by placeholder.
type secretBook struct {
	mu   sync.Mutex
	byPH map[string]*proxySecret
}

// Placeholder registers value for sandbox id's requests to hosts and
// returns the placeholder the sandbox sees instead (manager.ProxySecrets).
func (s *Service) Placeholder(id sandbox.ID, secret string, value []byte, hosts []string) (string, error) {
	set, err := rules.Compile(rules.Allowlist, hosts, nil)
	if err != nil {
		return "", fmt.Errorf("secret %s: hosts: %w", secret, err)
	}
	var b [16]byte
	rand.Read(b[:])
	ph := placeholderPrefix + hex.EncodeToString(b[:])
	s.secrets.mu.Lock()
	defer s.secrets.mu.Unlock()
	if s.secrets.byPH == nil {
		s.secrets.byPH = map[string]*proxySecret{}
	}
	s.secrets.byPH[ph] = &proxySecret{sandbox: id, name: secret, value: string(value), hosts: set}
	return ph, nil
}

// Restore registers value again under a placeholder Placeholder gave
// sandbox id before a daemon restart (manager.ProxySecrets).
func (s *Service) Restore(id sandbox.ID, placeholder, secret string, value []byte, hosts []string) error {
	if !placeholderRE.MatchString(placeholder) || len(placeholder) != len(placeholderPrefix)+32 {
		return fmt.Errorf("secret %s: %q is not a placeholder of this daemon", secret, placeholder)
	}
	set, err := rules.Compile(rules.Allowlist, hosts, nil)
	if err != nil {
		return fmt.Errorf("secret %s: hosts: %w", secret, err)
	}
	s.secrets.mu.Lock()
	defer s.secrets.mu.Unlock()
	if s.secrets.byPH == nil {
		s.secrets.byPH = map[string]*proxySecret{}
	}
	if e, ok := s.secrets.byPH[placeholder]; ok && e.sandbox != id {
		return fmt.Errorf("secret %s: placeholder held by another sandbox", secret)
	}
	s.secrets.byPH[placeholder] = &proxySecret{sandbox: id, name: secret, value: string(value), hosts: set}
	return nil
}

// ForgetSecrets drops sandbox id's proxy-mode secrets (manager.ProxySecrets).
func (s *Service) ForgetSecrets(id sandbox.ID) {
	s.secrets.mu.Lock()
	defer s.secrets.mu.Unlock()
	for ph, e := range s.secrets.byPH {
		if e.sandbox == id {
			delete(s.secrets.byPH, ph)
		}
	}
}

// Intercept says whether sandbox id has a proxy-mode secret for host
// (proxy.Secrets).
func (s *Service) Intercept(id, host string) bool {
	s.secrets.mu.Lock()
	defer s.secrets.mu.Unlock()
	for _, e := range s.secrets.byPH {
		if string(e.sandbox) == id && e.hosts.Name(host).Allow {
			return true
		}
	}
	return false
}

// Rewrite puts into h the values of sandbox id's secrets whose placeholders
// it holds, when the request goes to one of the secret's hosts over TLS
// (proxy.Secrets). A placeholder is left as it is when the host is not the
// secret's, the request is plain HTTP, or it is another sandbox's.
func (s *Service) Rewrite(id, host string, h http.Header, secure bool) (left []string) {
	s.secrets.mu.Lock()
	defer s.secrets.mu.Unlock()
	if len(s.secrets.byPH) == 0 {
		return nil
	}
	for k, vs := range h {
		for i, v := range vs {
			if !strings.Contains(v, placeholderPrefix) {
				continue
			}
			h[k][i] = placeholderRE.ReplaceAllStringFunc(v, func(ph string) string {
				e := s.secrets.byPH[ph]
				switch {
				case e == nil || string(e.sandbox) != id:
					left = append(left, "a placeholder that is not this sandbox's, in header "+k+": not substituted")
				case !e.hosts.Name(host).Allow:
					left = append(left, fmt.Sprintf("secret %s in header %s to %s, not one of its hosts: not substituted", e.name, k, host))
				case !secure:
					left = append(left, fmt.Sprintf("secret %s in header %s over plain HTTP: not substituted", e.name, k))
				default:
					return e.value
				}
				return ph
			})
		}
	}
	return left
}
