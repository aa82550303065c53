package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// describing is a Registerer that notes the name and labels of each
// series registered through it.
type describing struct {
	prometheus.Registerer
	labels map[string][]string
}

var descRe = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		m := descRe.FindStringSubmatch(desc.String())
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		d.labels[m[1]] = labels
	}
	return d.Registerer.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// TestReadmeMetricsTableIsTheSeries checks the README's metrics table
// against the series a daemon's library part registers (all but the HTTP
// ones, which the daemon's API registers): each series is in the table
// with its labels, and each row of the table but the HTTP ones names a
// series.
func TestReadmeMetricsTableIsTheSeries(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	d := &describing{Registerer: prometheus.NewRegistry(), labels: map[string][]string{}}
	m := New(d)
	c := testCoordinator(t, func(s kv.Store) kv.Store { return m.WrapStore(s, "pebble") })
	w, err := worker.New(c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m.RegisterJobs(c, nil)
	m.RegisterWorker(w)

	documented := map[string][]string{}
	nameRe := regexp.MustCompile("`(leasehold_[a-z_]+|_[a-z_]+)`")
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 6 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`leasehold_") {
			continue
		}
		var labels []string
		if l, _, _ := strings.Cut(cells[3], "("); strings.TrimSpace(l) != "" {
			for _, s := range strings.Split(l, ",") {
				labels = append(labels, strings.TrimSpace(s))
			}
		}
		var first string
		for _, n := range nameRe.FindAllStringSubmatch(cells[1], -1) {
			name := n[1]
			if first == "" {
				first = name
			} else if strings.HasPrefix(name, "_") {
				// `leasehold_job_cancellations_total`, `_snoozes_total`
				parts := strings.SplitN(first, "_", 3)
				name = parts[0] + "_" + parts[1] + name
			}
			documented[name] = labels
		}
	}
	if len(documented) < 20 {
		t.Fatalf("README: read %d series from the metrics table; is it still there?", len(documented))
	}
	for name, labels := range d.labels {
		doc, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("README metrics table: %s is not listed", name)
		case !slices.Equal(doc, labels):
			t.Errorf("README metrics table: %s has labels %q, the README says %q", name, labels, doc)
		}
	}
	for name := range documented {
		if _, ok := d.labels[name]; !ok && !strings.HasPrefix(name, "leasehold_http_") {
			t.Errorf("README metrics table lists %s, which is not registered", name)
		}
	}
}
