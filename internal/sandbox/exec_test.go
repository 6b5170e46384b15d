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
