package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// E2B is the remote server the e2b backend runs sandboxes on ([e2b] in the
// file): any server speaking E2B's API (real E2B, or another sbx). The
// backend is used only when backends lists it, and creates on it succeed
// only when policy.allow_missing accepts every isolation layer, since an
// E2B server reports none (README, "Backends").
type E2B struct {
	// URL is the control plane's base, without /v2: https://api.e2b.app, or
	// another sbx's http://host:port. Env SBX_E2B_URL.
	URL string `toml:"url"`
	// SandboxURL is the base every sandbox's envd is reached at, with E2B's
	// routing headers (E2b-Sandbox-Id, E2b-Sandbox-Port). Empty (the
	// default) derives it as E2B's SDK does: https://sandbox.<domain> for the
	// domain a create answers when it is E2B's own (e2b.app...),
	// https://49983-<id>.<domain> for another, and URL when it answers none
	// (another sbx serves both). Env SBX_E2B_SANDBOX_URL.
	SandboxURL string `toml:"sandbox_url"`
	// APIKeyFile holds the API key (read at start; never logged). Env
	// SBX_E2B_API_KEY_FILE; SBX_E2B_API_KEY gives the key itself.
	APIKeyFile string `toml:"api_key_file"`
	// APIKey is the key, from SBX_E2B_API_KEY or APIKeyFile.
	APIKey string `toml:"-"`
	// Template is the remote template sbx's default template (host) runs
	// as; default "base". Other sbx template names the policy admits are
	// passed to the remote as they are. Env SBX_E2B_TEMPLATE.
	Template string `toml:"template"`
}

func defaultE2B() E2B { return E2B{Template: "base"} }

func (e *E2B) applyEnv(getenv func(string) string) {
	for key, dst := range map[string]*string{
		"SBX_E2B_URL": &e.URL, "SBX_E2B_SANDBOX_URL": &e.SandboxURL, "SBX_E2B_API_KEY_FILE": &e.APIKeyFile,
		"SBX_E2B_API_KEY": &e.APIKey, "SBX_E2B_TEMPLATE": &e.Template,
	} {
		if v := getenv(key); v != "" {
			*dst = v
		}
	}
}

// checkE2B checks the remote's URLs and reads its key file. A missing URL
// or key is not an error here: the backend's probe says so, by name, and
// the daemon runs without it.
func checkE2B(c *Config) error {
	e := &c.E2B
	var errs []error
	for _, u := range []struct{ field, v string }{{"e2b.url", e.URL}, {"e2b.sandbox_url", e.SandboxURL}} {
		if u.v == "" {
			continue
		}
		p, err := url.Parse(u.v)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" || p.User != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an http(s) URL without user, query or fragment", u.field, u.v))
		}
	}
	if e.Template == "" {
		errs = append(errs, errors.New("e2b.template: empty; name the remote template sandboxes start from (E2B's default is base)"))
	}
	if e.APIKey == "" && e.APIKeyFile != "" {
		b, err := os.ReadFile(e.APIKeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("e2b.api_key_file: %w", err))
		} else {
			e.APIKey = strings.TrimSpace(string(b))
		}
	}
	return errors.Join(errs...)
}
