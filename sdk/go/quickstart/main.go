// Command quickstart is the Go SDK's five-minute tour: it creates a sandbox,
// runs a command and streams another's output, moves a file in and out as a
// stream, calls a tool, and deletes the sandbox. It reads SBX_URL and
// SBX_API_KEY (or finds a local daemon's data dir), like the sbx CLI.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/client"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Discover()
	if err != nil {
		return err
	}
	defer c.Close()

	ttl := int64(300)
	sb, err := c.Create(ctx, openapi.CreateSandboxRequest{Timeout: &ttl, Labels: map[string]string{"app": "quickstart"},
		Env: map[string]string{"GREETING": "hello"}})
	if err != nil {
		return err
	}
	defer c.Delete(context.Background(), sb.ID)
	fmt.Println("sandbox", sb.ID, "isolation", sb.Isolation.Level)

	// A command to completion.
	res, err := c.Exec(ctx, sb.ID, openapi.ExecRequest{Command: "echo $GREETING from $(uname -s)"})
	if err != nil {
		return err
	}
	stdout, _ := client.Output(res)
	fmt.Printf("exec: exit %d, %s", client.ExitCode(res), stdout)

	// A streamed one: each line arrives as it is printed.
	lines := 0
	_, err = c.ExecStream(ctx, sb.ID, openapi.ExecRequest{Command: "for i in 1 2 3; do echo line $i; sleep 0.1; done"},
		func(ev openapi.Event) error {
			if ev.Type == "stdout" {
				lines++
				fmt.Printf("stream: %s", client.EventData(ev))
			}
			return nil
		})
	if err != nil {
		return err
	}

	// A file in and out as streams (8 MiB here; any size works).
	data := bytes.Repeat([]byte("sbx!"), 2<<20)
	if _, err := c.Upload(ctx, sb.ID, "big.bin", bytes.NewReader(data), 0o644); err != nil {
		return err
	}
	rc, _, err := c.Download(ctx, sb.ID, "big.bin")
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(h, rc)
	rc.Close()
	if err != nil {
		return err
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		return fmt.Errorf("the download differs from the upload")
	}
	fmt.Println("files: round trip of", n, "bytes ok")

	// A tool, by name, with its typed result.
	var found struct {
		Paths []string `json:"paths"`
	}
	if err := c.CallTool(ctx, sb.ID, "glob", map[string]any{"pattern": "*.bin"}, &found); err != nil {
		return err
	}
	if len(found.Paths) != 1 {
		return fmt.Errorf("glob found %v, want big.bin", found.Paths)
	}
	fmt.Println("tool glob:", found.Paths)

	// Errors carry their class and the sandbox id.
	_, err = c.Get(ctx, "aaaaaaaaaaaaaaaaaaaaaaaaaa")
	var e *client.Error
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &e) {
		return fmt.Errorf("an unknown sandbox gave %v", err)
	}
	fmt.Println("errors: unknown sandbox is", client.Code(err), "for", e.ID)

	if err := c.Delete(ctx, sb.ID); err != nil {
		return err
	}
	fmt.Println("deleted", sb.ID)
	if lines != 3 {
		return fmt.Errorf("streamed %d lines, want 3", lines)
	}
	return nil
}
