package amqp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ApplyPolicies creates or updates each policy through the management HTTP
// API at mgmtURL, in the vhost of amqpURL. Credentials come from mgmtURL, or
// from amqpURL when mgmtURL has none. Errors never contain credentials.
func ApplyPolicies(ctx context.Context, mgmtURL, amqpURL string, policies []Policy) error {
	if len(policies) == 0 {
		return nil
	}
	base, err := url.Parse(mgmtURL)
	if err != nil {
		return fmt.Errorf("parsing management url: %w", err)
	}
	au, err := url.Parse(amqpURL)
	if err != nil {
		return fmt.Errorf("parsing amqp url: invalid")
	}
	user := base.User
	if user == nil {
		user = au.User
	}
	if user == nil {
		user = url.UserPassword("guest", "guest")
	}
	base.User = nil
	vhost := strings.TrimPrefix(au.Path, "/")
	if vhost == "" {
		vhost = "/"
	} else if v, err := url.PathUnescape(vhost); err == nil {
		vhost = v
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, p := range policies {
		body, err := json.Marshal(map[string]any{
			"pattern": p.Pattern, "definition": p.Definition, "priority": p.Priority, "apply-to": p.ApplyTo,
		})
		if err != nil {
			return fmt.Errorf("encoding policy %s: %w", p.Name, err)
		}
		endpoint := strings.TrimSuffix(base.String(), "/") + "/api/policies/" + url.PathEscape(vhost) + "/" + url.PathEscape(p.Name)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, endpoint, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("building policy request: %w", err)
		}
		pass, _ := user.Password()
		req.SetBasicAuth(user.Username(), pass)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("applying policy %s via the management API at %s: %w", p.Name, base.Host, unwrapURLError(err))
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("applying policy %s via the management API at %s: %s: %s", p.Name, base.Host, resp.Status, bytes.TrimSpace(msg))
		}
	}
	return nil
}

// unwrapURLError drops the URL from an *url.Error (it may carry
// credentials) and keeps the operation and cause.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
