package sandbox

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestExecRequestCommand(t *testing.T) {
	if got := (ExecRequest{Shell: "echo $HOME"}).Command(); !slices.Equal(got, []string{"/bin/sh", "-c", "echo $HOME"}) {
		t.Errorf("shell command = %q", got)
	}
	if got := (ExecRequest{Argv: []string{"echo", "$HOME"}}).Command(); !slices.Equal(got, []string{"echo", "$HOME"}) {
		t.Errorf("argv = %q", got)
	}
}

func TestExecRequestCheck(t *testing.T) {
	for _, tc := range []struct {
		req  ExecRequest
		want string // "" for valid
	}{
		{ExecRequest{Argv: []string{"true"}}, ""},
		{ExecRequest{Shell: "true"}, ""},
		{ExecRequest{}, "command: give command (run by /bin/sh -c) or argv (run as is)"},
		{ExecRequest{Shell: "true", Argv: []string{"true"}}, "command: give command or argv, not both"},
		{ExecRequest{Argv: []string{""}}, "argv[0]: is empty"},
		{ExecRequest{Argv: []string{"echo", "a\x00b"}}, "argv[1]: contains a NUL byte"},
		{ExecRequest{Shell: "a\x00"}, "command: contains a NUL byte"},
		{ExecRequest{Shell: "true", Env: map[string]string{"A": "\x00"}}, `env: "A" contains a NUL byte`},
		{ExecRequest{Shell: "true", Cwd: "/a\x00"}, "cwd: contains a NUL byte"},
	} {
		err := tc.req.Check()
		if tc.want == "" {
			if err != nil {
				t.Errorf("Check(%+v) = %v, want nil", tc.req, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v, want invalid argument %q", tc.req, err, tc.want)
		}
	}
}

// The secrets a create or an exec names are checked for shape by the policy:
// valid variable names, none also in env, a secret name for each.
func TestAdmitSecretRefs(t *testing.T) {
	p := DefaultPolicy()
	for _, tc := range []struct {
		refs map[string]string
		env  map[string]string
		want string // "" for valid
	}{
		{map[string]string{"API_KEY": "my-api-key"}, nil, ""},
		{map[string]string{"API_KEY": "a"}, map[string]string{"OTHER": "x"}, ""},
		{map[string]string{"1X": "a"}, nil, `secrets: "1X" is not a valid variable name`},
		{map[string]string{"A-B": "a"}, nil, `secrets: "A-B" is not a valid variable name`},
		{map[string]string{"API_KEY": "a"}, map[string]string{"API_KEY": "x"}, "secrets: API_KEY is also given in env"},
		{map[string]string{"API_KEY": ""}, nil, "secrets: API_KEY: no secret name"},
	} {
		_, cerr := p.Admit(CreateRequest{Secrets: tc.refs, Env: tc.env})
		_, xerr := p.AdmitExec(ExecRequest{Shell: "true", Secrets: tc.refs, Env: tc.env})
		for _, err := range []error{cerr, xerr} {
			if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Admit with secrets %v, env %v = %v, want %q", tc.refs, tc.env, err, tc.want)
			}
		}
	}
	many := map[string]string{}
	for i := range MaxSecretRefs + 1 {
		many["V"+strings.Repeat("X", i)] = "s"
	}
	if _, err := p.Admit(CreateRequest{Secrets: many}); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Errorf("Admit with %d secrets = %v", len(many), err)
	}
}
