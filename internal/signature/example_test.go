package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hookrelay/hookrelay/internal/signature"
)

// A Stripe source verified with two secrets while the endpoint's secret is
// rolled. The request is signed here the way Stripe signs it.
func ExampleNewStripe() {
	const secret = "whsec_example_new"
	v, err := signature.NewStripe(signature.StripeConfig{
		Secrets:   []string{"whsec_example_old", secret},
		Tolerance: 5 * time.Minute,
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	body := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	signedAt := time.Unix(1700000000, 0)
	ts := strconv.FormatInt(signedAt.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret)) // the whole "whsec_..." string is the key
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	header := http.Header{}
	header.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac.Sum(nil)))

	// Arrives 30 seconds later: accepted.
	err = v.Verify(&signature.Request{Header: header, Body: body, Now: signedAt.Add(30 * time.Second)})
	fmt.Println("genuine:", err)

	// The same request replayed an hour later.
	err = v.Verify(&signature.Request{Header: header, Body: body, Now: signedAt.Add(time.Hour)})
	fmt.Println("replayed:", err, errors.Is(err, signature.ErrExpired))

	// A body changed in transit.
	err = v.Verify(&signature.Request{Header: header, Body: []byte(`{"id":"evt_1","type":"invoice.voided"}`), Now: signedAt})
	var ve *signature.VerifyError
	if errors.As(err, &ve) {
		fmt.Println("tampered:", ve.Reason, ve.Kind())
	}

	// Output:
	// genuine: <nil>
	// replayed: timestamp outside tolerance (5m0s either way) true
	// tampered: signature mismatch mismatch
}
