package repl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// errNoLLM is what llm_query raises (after "llm_query: ") when the daemon
// has no model endpoint.
var errNoLLM = errors.New("no model endpoint is configured on the sbx daemon (set [llm] url in its config)")

// maxLLMResponse bounds the body read from the model endpoint.
const maxLLMResponse = 16 << 20

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model    string        `json:"model,omitempty"`
	Messages []chatMessage `json:"messages"`
}

// chatResponse is the part of a chat completion that is read. Content is a
// string, or (some servers) a list of parts.
type chatResponse struct {
	Choices []struct {
		Message struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// ask sends one chat completion and returns the reply's text. Its errors
// are shown to the cell, so they name the endpoint's answer but never the
// key.
func (l LLM) ask(ctx context.Context, prompt string, system *string) (string, error) {
	if l.URL == "" {
		return "", errNoLLM
	}
	req := chatRequest{Model: l.Model}
	if system != nil {
		req.Messages = append(req.Messages, chatMessage{Role: "system", Content: *system})
	}
	req.Messages = append(req.Messages, chatMessage{Role: "user", Content: prompt})
	body, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encoding the request: %w", err)
	}
	endpoint := strings.TrimRight(l.URL, "/") + "/chat/completions"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("bad model endpoint URL %q: %w", l.URL, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if l.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+l.APIKey)
	}
	client := l.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return "", fmt.Errorf("calling the model endpoint %s: %w", endpoint, unwrapURLError(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxLLMResponse))
	if err != nil {
		return "", fmt.Errorf("reading the model endpoint's answer: %w", err)
	}
	return replyText(resp.Status, resp.StatusCode, data)
}

// replyText takes the text out of a chat completion answer.
func replyText(status string, code int, data []byte) (string, error) {
	var cr chatResponse
	jsonErr := json.Unmarshal(data, &cr)
	if code/100 != 2 {
		why := strings.TrimSpace(string(data))
		if jsonErr == nil && cr.Error != nil && cr.Error.Message != "" {
			why = cr.Error.Message
		}
		return "", fmt.Errorf("the model endpoint answered %s: %s", status, clip(why, 500))
	}
	if jsonErr != nil {
		return "", fmt.Errorf("the model endpoint's answer is not a chat completion: %w", jsonErr)
	}
	if len(cr.Choices) == 0 {
		return "", errors.New("the model endpoint's answer has no choices")
	}
	return contentText(cr.Choices[0].Message.Content)
}

// contentText reads a message's content: a string, null, or a list of parts
// whose text parts are joined.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("the model's reply content is neither text nor a list of parts: %s", clip(string(raw), 200))
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" || p.Type == "" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// unwrapURLError drops url.Error's "Post <url>:" prefix: the URL is said once.
func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
