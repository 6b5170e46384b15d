package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"sbx.dev/sbx/internal/isolation/seccomp"
)

// loadSeccompProfiles registers the operator's seccomp profiles, one JSON
// file each in dir (seccomp.Profile: name, extends, rules), and checks that
// the policy's profile exists. A profile that does not parse or compile, or
// a policy naming an unknown one, stops the daemon, naming it.
func loadSeccompProfiles(dir, policyProfile string) error {
	if dir != "" {
		files, err := filepath.Glob(filepath.Join(dir, "*.json"))
		if err != nil {
			return fmt.Errorf("seccomp_profiles_dir: %w", err)
		}
		slices.Sort(files)
		for _, f := range files {
			js, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("seccomp_profiles_dir: %w", err)
			}
			p, err := seccomp.Parse(js)
			if err != nil {
				return fmt.Errorf("seccomp profile %s: %w", f, err)
			}
			if err := seccomp.Register(p); err != nil {
				return fmt.Errorf("seccomp profile %s: %w", f, err)
			}
		}
	}
	if policyProfile == "" {
		return nil
	}
	if _, err := seccomp.Lookup(policyProfile); err != nil {
		return fmt.Errorf("policy.seccomp_profile: %w", err)
	}
	return nil
}
