// This file implements the operator's directory templates: [templates.NAME]
// sections, SBX_TEMPLATES, their checks, and their place in the policy's
// templates allowlist.

package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sbx.dev/sbx/internal/sandbox"
)

// Template is a directory template ([templates.NAME] in the file): sandboxes
// created with template NAME get Rootfs, read-only, as the root under their
// own writable layer, instead of the host's /usr and /etc.
type Template struct {
	// Rootfs is the absolute path of a directory holding a whole Linux root
	// (bin, lib, usr, etc…; /bin/sh for shell commands). Its content is
	// untrusted: what the driver does with it is in README, "Templates".
	Rootfs string `toml:"rootfs"`
}

// templateName is what a template may be called: it is a word of the API.
var templateName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// applyTemplatesEnv adds SBX_TEMPLATES ("name=/abs/dir,name2=/dir2") to the
// templates, replacing any of the same name.
func (c *Config) applyTemplatesEnv(getenv func(string) string) error {
	v := getenv("SBX_TEMPLATES")
	if v == "" {
		return nil
	}
	var errs []error
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		name, dir, ok := strings.Cut(e, "=")
		if !ok || name == "" {
			errs = append(errs, fmt.Errorf("templates (from SBX_TEMPLATES): %q is not name=/abs/dir", e))
			continue
		}
		if c.Templates == nil {
			c.Templates = map[string]Template{}
		}
		c.Templates[strings.TrimSpace(name)] = Template{Rootfs: strings.TrimSpace(dir)}
	}
	return errors.Join(errs...)
}

// allowTemplates adds the configured templates, by name, after the policy's
// own, unless the file gave policy.templates: the operator who configured a
// template meant it to be used, and the first (by default host) stays the
// default.
func (c *Config) allowTemplates() {
	if c.policyTemplatesSet {
		return
	}
	c.Policy.Templates = slices.Clone(c.Policy.Templates)
	for _, name := range slices.Sorted(maps.Keys(c.Templates)) {
		if !slices.Contains(c.Policy.Templates, name) {
			c.Policy.Templates = append(c.Policy.Templates, name)
		}
	}
}

// TemplateNames are the templates a sandbox may be made from on this
// configuration: host and the configured ones, sorted after it.
func (c *Config) TemplateNames() []string {
	return append([]string{sandbox.TemplateHost}, slices.Sorted(maps.Keys(c.Templates))...)
}

// checkTemplates checks each template's name and root directory, and that
// the policy's allowlist names only templates that exist.
func checkTemplates(c *Config) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.Templates)) {
		field := "templates." + name
		switch {
		case name == sandbox.TemplateHost:
			errs = append(errs, fmt.Errorf("%s: %q is the built-in template; give yours another name", field, name))
			continue
		case !templateName.MatchString(name):
			errs = append(errs, fmt.Errorf("templates: %q is not a template name (1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit)", name))
			continue
		}
		if err := checkRootfs(c.Templates[name].Rootfs, c.DataDir); err != nil {
			errs = append(errs, fmt.Errorf("%s.rootfs: %w", field, err))
		}
	}
	known := c.TemplateNames()
	for _, name := range c.Policy.Templates {
		if !slices.Contains(known, name) {
			errs = append(errs, fmt.Errorf("policy.templates: %q is neither host nor a [templates.%s] section (known: %s)", name, name, strings.Join(known, ", ")))
		}
	}
	return errors.Join(errs...)
}

// checkRootfs says what is wrong with dir as a template's root, if anything:
// it must be an absolute path to a directory, not the host's root, and not
// hold the data dir (a sandbox would read the daemon's keys: the template is
// mapped so that host root is the sandbox's root).
func checkRootfs(dir, dataDir string) error {
	if dir == "" {
		return errors.New("missing: give the absolute path of a directory holding a whole Linux root")
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%q is not an absolute path", dir)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist", dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if real == "/" {
		return fmt.Errorf("%s is the host's root; the host template shows what of it a sandbox may see", dir)
	}
	data := filepath.Clean(dataDir)
	if r, err := filepath.EvalSymlinks(data); err == nil {
		data = r
	}
	if data == real || strings.HasPrefix(data, real+"/") {
		return fmt.Errorf("%s holds the data dir %s, whose keys its sandboxes would read", dir, dataDir)
	}
	return nil
}
