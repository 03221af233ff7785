package adminapi

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/xds/ir"
)

// ParseAmount reads a USD amount as operators write it, on the command line and in request
// bodies: "5", "12.50", "0.000001"; a sign is taken (callers say which amounts may be negative),
// an exponent is not: the bounds keep hostile amounts (1e999999999, a million digits) away from
// the decimal arithmetic.
func ParseAmount(s string) (decimal.Decimal, error) {
	if ir.PlainDecimal(strings.TrimPrefix(s, "-")) {
		return decimal.NewFromString(s)
	}
	if len(s) < 100 && decimalText.MatchString(s) {
		return decimal.Decimal{}, fmt.Errorf("%s has too many digits for an amount in USD (at most %d before the point and %d after)",
			ir.QuoteShort(s), ir.MaxAmountIntegerDigits, ir.MaxAmountFractionDigits)
	}
	return decimal.Decimal{}, fmt.Errorf("%s is not a decimal amount in USD", ir.QuoteShort(s))
}

// decimalText is a decimal of any length, to tell "too many digits" from "not a number".
var decimalText = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)
