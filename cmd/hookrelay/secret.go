package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

// secretBytes is the size of a new signing secret: 32 random bytes, as
// Svix and the Standard Webhooks libraries make them (at least 16 are
// required).
const secretBytes = 32

func (c *cli) secretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Make a route's signing secret, or the key that seals run-time routes' secrets",
		Args:  setup.NoArgs,
		RunE:  showHelp,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "new",
		Short: "Print a new Standard Webhooks signing secret (whsec_...)",
		Long: `Print a new signing secret for a route's signing_secret: "whsec_" and the
standard base64 of 32 random bytes. Give it to the route's destination too: it
verifies each delivery's webhook-signature with it. Reads no config.`,
		Example: `  export BILLING_SIGNING_SECRET=$(hookrelay secret new)`,
		Args:    setup.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			key := make([]byte, secretBytes)
			if _, err := rand.Read(key); err != nil {
				return fmt.Errorf("reading random bytes: %w", err)
			}
			_, err := fmt.Fprintln(c.out, "whsec_"+base64.StdEncoding.EncodeToString(key))
			return err
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "key",
		Short: "Print a new secrets.key: standard base64 of 32 random bytes",
		Long: `Print a new key for secrets.key, which seals (AES-256-GCM) the signing secrets
of routes made at run time. Give it to every receiver and dispatcher from the
environment (HOOKRELAY_SECRETS_KEY). Reads no config.`,
		Example: `  export HOOKRELAY_SECRETS_KEY=$(hookrelay secret key)`,
		Args:    setup.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			key := make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				return fmt.Errorf("reading random bytes: %w", err)
			}
			_, err := fmt.Fprintln(c.out, base64.StdEncoding.EncodeToString(key))
			return err
		},
	})
	return cmd
}
