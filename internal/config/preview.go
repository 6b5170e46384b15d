package config

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
)

// Preview is how preview URLs are formed and recognised ([preview] in the
// file): the daemon's reverse proxy into the ports of sandboxes.
type Preview struct {
	// Domain: a request to the daemon whose Host is <port>-<id>.<domain> is
	// proxied to that port of that sandbox. Default "localhost", whose
	// subdomains browsers and curl resolve to loopback; another domain needs
	// a wildcard DNS record pointing at the daemon. Env SBX_PREVIEW_DOMAIN.
	Domain string `toml:"domain"`
	// Scheme of the preview URLs handed out: http (default), or https when a
	// TLS proxy fronts the daemon. Env SBX_PREVIEW_SCHEME.
	Scheme string `toml:"scheme"`
	// PublicURL is the daemon's address as clients reach it, e.g.
	// https://sbx.example.com: the base of path-form URLs and the port of
	// host-form ones. Empty: http://<listen>. Env SBX_PREVIEW_PUBLIC_URL.
	PublicURL string `toml:"public_url"`
}

func defaultPreview() Preview { return Preview{Domain: "localhost", Scheme: "http"} }

func (p *Preview) applyEnv(getenv func(string) string) {
	for key, dst := range map[string]*string{
		"SBX_PREVIEW_DOMAIN": &p.Domain, "SBX_PREVIEW_SCHEME": &p.Scheme, "SBX_PREVIEW_PUBLIC_URL": &p.PublicURL,
	} {
		if v := getenv(key); v != "" {
			*dst = v
		}
	}
}

// maxPreviewDomain leaves room under DNS's 253 characters for the label
// <port>-<id> (32 characters) and its dot.
const maxPreviewDomain = 253 - 33

func checkPreview(c *Config) error {
	p := c.Preview
	var errs []error
	if err := checkDomain(p.Domain); err != nil {
		errs = append(errs, fmt.Errorf("preview.domain: %q %v", p.Domain, err))
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		errs = append(errs, fmt.Errorf("preview.scheme: %q is not http or https", p.Scheme))
	}
	if p.PublicURL != "" {
		u, err := url.Parse(p.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("preview.public_url: %q is not an http(s) URL without user, query or fragment", p.PublicURL))
		}
	}
	return errors.Join(errs...)
}

// checkDomain says what is wrong with domain as DNS name, if anything:
// lower-case labels of letters, digits and hyphens.
func checkDomain(domain string) error {
	if domain == "" || len(domain) > maxPreviewDomain {
		return fmt.Errorf("is not 1 to %d characters", maxPreviewDomain)
	}
	for _, l := range strings.Split(domain, ".") {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") ||
			strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return fmt.Errorf("is not a DNS name of lower-case labels (letters, digits, hyphens)")
		}
	}
	return nil
}

// checkOrigins refuses an allowed origin that is not a host pattern.
func checkOrigins(c *Config) error {
	var errs []error
	for _, o := range c.AllowedOrigins {
		_, err := path.Match(o, "")
		if o == "" || strings.Contains(o, "/") || err != nil {
			errs = append(errs, fmt.Errorf("allowed_origins: %q is not a host pattern like ui.example.com or *.example.com:8443 (no scheme, no path)", o))
		}
	}
	return errors.Join(errs...)
}
