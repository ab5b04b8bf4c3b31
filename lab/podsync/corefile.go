package main

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	reKubernetes = regexp.MustCompile(`^(\s*)kubernetes(\s|$|\{)`)
	reForward    = regexp.MustCompile(`^(\s*)forward\s`)
	reKubeconfig = regexp.MustCompile(`^\s*kubeconfig\s`)
)

// rewriteCorefile adapts a cluster Corefile to the lab, line by line:
//
//   - every `kubernetes` block gets `kubeconfig <path>` (the lab's CoreDNS is
//     not in a real pod, so it has no in-cluster service-account config);
//     a block-less `kubernetes ZONES` line is turned into a block;
//   - every `forward` directive (with its block) is replaced by a comment:
//     the lab has no upstream resolver, names outside the cluster zones get
//     no answer from the lab's CoreDNS (SERVFAIL/REFUSED).
//
// Everything else is kept verbatim.
func rewriteCorefile(in, kubeconfig string) string {
	lines := strings.Split(in, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := reForward.FindStringSubmatch(l); m != nil && !isComment(l) {
			out = append(out, m[1]+"# ghostip lab: removed (no upstream resolver): "+strings.TrimSpace(l))
			if braceDepth(l) > 0 {
				depth := braceDepth(l)
				for i+1 < len(lines) && depth > 0 {
					i++
					depth += braceDepth(lines[i])
					out = append(out, m[1]+"#   "+strings.TrimSpace(lines[i]))
				}
			}
			continue
		}
		if m := reKubernetes.FindStringSubmatch(l); m != nil && !isComment(l) {
			ind := m[1]
			if braceDepth(l) > 0 {
				out = append(out, l)
				// Drop an existing kubeconfig line inside this block.
				depth := braceDepth(l)
				var body []string
				for i+1 < len(lines) && depth > 0 {
					i++
					depth += braceDepth(lines[i])
					if reKubeconfig.MatchString(lines[i]) {
						continue
					}
					body = append(body, lines[i])
				}
				out = append(out, fmt.Sprintf("%s   kubeconfig %s", ind, kubeconfig))
				out = append(out, body...)
				continue
			}
			out = append(out, strings.TrimRight(l, " \t")+" {")
			out = append(out, fmt.Sprintf("%s   kubeconfig %s", ind, kubeconfig))
			out = append(out, ind+"}")
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func isComment(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "#") }

// braceDepth returns the net number of braces a line opens (ignoring a
// trailing comment).
func braceDepth(l string) int {
	if i := strings.Index(l, "#"); i >= 0 {
		l = l[:i]
	}
	return strings.Count(l, "{") - strings.Count(l, "}")
}
