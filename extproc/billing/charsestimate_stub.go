package billing

// TEMPORARY stand-in (replaced by charsestimate.go).
func TokensFromChars(chars int64) int64 { return (chars + 3) / 4 }
