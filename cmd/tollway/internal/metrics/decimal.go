package metrics

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
)

// decimalCounter is a counter summed in exact decimal: money is added as the ledger charged
// it, and only the total is turned into a float, at scrape time. (A float counter would gather
// rounding error with every addition.)
type decimalCounter struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	sums map[string]*decimalSum // by label values joined with \xff
}

type decimalSum struct {
	labels []string
	sum    decimal.Decimal
}

func newDecimalCounter(name, help string, labels ...string) *decimalCounter {
	return &decimalCounter{desc: prometheus.NewDesc(name, help, labels, nil), sums: map[string]*decimalSum{}}
}

func (c *decimalCounter) add(v decimal.Decimal, labels ...string) {
	if v.Sign() <= 0 {
		v = decimal.Zero // a counter never goes down; the ledger bills nothing below 0 either
	}
	k := strings.Join(labels, "\xff")
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sums[k]
	if s == nil {
		s = &decimalSum{labels: labels}
		c.sums[k] = s
	}
	s.sum = s.sum.Add(v)
}

func (c *decimalCounter) total() decimal.Decimal {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := decimal.Zero
	for _, s := range c.sums {
		t = t.Add(s.sum)
	}
	return t
}

func (c *decimalCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *decimalCounter) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sums {
		f, _ := s.sum.Float64()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, f, s.labels...)
	}
}
