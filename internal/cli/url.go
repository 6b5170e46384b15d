// This file implements `sbx url`.

package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"sbx.dev/sbx/api/openapi"
)

func runURL(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("url", "[--json] [--path] [--public | --private] ID PORT")
	jsonOut := fs.Bool("json", false, "print the port's URLs, token and whether it is public as JSON")
	byPath := fs.Bool("path", false, "print the URL under the daemon's address (no wildcard DNS needed)")
	public := fs.Bool("public", false, "first make the port public: served without a token")
	private := fs.Bool("private", false, "first make the port private again: the token is required")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	switch {
	case len(pos) < 2:
		return e.misuse(fs, exitMisuse, "want a sandbox ID and a port")
	case len(pos) > 2:
		return e.misuse(fs, exitMisuse, "unexpected argument %q", pos[2])
	case *public && *private:
		return e.misuse(fs, exitMisuse, "--public and --private exclude each other")
	}
	port, err := strconv.Atoi(pos[1])
	if err != nil || port < 1 || port > 65535 {
		return e.misuse(fs, exitMisuse, "port %q is not a number in [1, 65535]", pos[1])
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("url", *jsonOut, exitError, err)
	}
	defer c.Close()
	var u *openapi.PreviewURL
	if *public || *private {
		u, err = c.SetPortPublic(ctx, pos[0], port, *public)
	} else {
		u, err = c.PreviewURL(ctx, pos[0], port)
	}
	if err != nil {
		return e.fail("url", *jsonOut, exitError, err)
	}
	if *jsonOut {
		e.printJSON(u)
		return exitOK
	}
	fmt.Fprintln(e.stdout, openable(u, *byPath))
	return exitOK
}

// openable is the URL to open in a browser: with the token in its query
// (the proxy trades it for a cookie at once) unless the port is public.
func openable(u *openapi.PreviewURL, byPath bool) string {
	s := u.URL
	if byPath {
		s = u.PathURL
	}
	if u.Public || u.Token == "" {
		return s
	}
	return s + "?" + openapi.PreviewTokenQuery + "=" + url.QueryEscape(u.Token)
}
