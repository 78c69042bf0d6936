package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-dev/tenure/metrics"
)

// TestTheDashboardAndAlertsUseOnlyMetricsThatExist reads the Grafana
// dashboard and the Prometheus rules shipped in deploy/ and fails on any
// tenure_ metric the collector does not export: a renamed metric must not
// leave an alert that can never fire.
func TestTheDashboardAndAlertsUseOnlyMetricsThatExist(t *testing.T) {
	exported := map[string]bool{}
	descs := make(chan *prometheus.Desc, 64)
	go func() { metrics.New().Describe(descs); close(descs) }()
	fqName := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	if len(exported) < 10 {
		t.Fatalf("read only %d metric names from the collector: %v", len(exported), exported)
	}

	dashboard, err := os.ReadFile("../deploy/grafana/tenure-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &doc); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var exprs []string
	for _, p := range doc.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	alerts, err := os.ReadFile("../deploy/prometheus/tenure-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(alerts)) {
		if expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
			exprs = append(exprs, expr)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("found %d expressions in deploy/, want the dashboard's and the alerts'", len(exprs))
	}
	used := regexp.MustCompile(`tenure_[a-z_]+`)
	for _, e := range exprs {
		for _, name := range used.FindAllString(e, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && exported[b] {
					base = b
				}
			}
			if !exported[base] {
				t.Errorf("%q uses %s, which the collector does not export", e, name)
			}
		}
	}
}
