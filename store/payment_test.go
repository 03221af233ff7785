package store

import (
	"errors"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// TestPaidRecords: a request paid through x402 is recorded with its payment (read back
// whole), counted in the aggregates with what was paid, and debits no credits and no month
// spend, for a keyed account and for the endpoint's own x402.<slug> account, which has no row
// and cannot be created.
func TestPaidRecords(t *testing.T) {
	s, path := openTemp(t)
	mustAccount(t, s, "acme", "5")
	now := time.Now().UTC()
	pay := &Payment{Endpoint: "chat-mini", Scheme: "upto", Network: "eip155:31337", Asset: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
		Payer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", Amount: "1019", AmountUSD: dec("0.001019"), Transaction: "0xabc"}
	recs := []UsageRecord{
		{RequestID: "r1", KeyID: "key_1", Account: "acme", Model: "m", Cost: dec("0.001019"), Time: now, Payment: pay},
		{RequestID: "r2", KeyID: "x402.chat-mini", Account: "x402.chat-mini", Model: "m", Cost: dec("0.001019"), Time: now, Payment: pay},
	}
	for i, err := range s.SettleBatch(recs) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if a, _ := s.GetAccount("acme"); !a.Balance.Equal(dec("5")) {
		t.Fatalf("a paid request debited credits: %s", a.Balance)
	}
	if spend, _ := s.MonthSpend(now.Format(monthLayout)); !spend["key_1"].IsZero() {
		t.Fatalf("month spend %v", spend)
	}
	s.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.UsageRecords(UsageFilter{Account: "x402.chat-mini"}, 10)
	if err != nil || len(got) != 1 || got[0].Payment == nil || (got[0].Payment.Transaction != "0xabc" || !got[0].Payment.AmountUSD.Equal(pay.AmountUSD) || got[0].Payment.Payer != pay.Payer || got[0].Payment.Amount != "1019") {
		t.Fatalf("read back %+v %v", got, err)
	}
	sum, err := s.Usage(UsageFilter{})
	if err != nil || !sum.Paid.Equal(dec("0.002038")) || !sum.Cost.Equal(dec("0.002038")) || sum.Requests != 2 {
		t.Fatalf("totals %+v %v", sum.UsageTotals, err)
	}
	if _, err := s.CreateAccount("x402.chat-mini", decimal.Zero); !errors.Is(err, ErrInvalid) {
		t.Fatalf("the reserved account could be created: %v", err)
	}
}
