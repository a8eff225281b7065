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
		Short: "Make a route's signing secret",
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
	return cmd
}
