{{/*
The mode, checked: one of the kustomizations of deploy/ (values.yaml).
*/}}
{{- define "ipvs-proxy.mode" -}}
{{- $modes := list "migrate-node-by-node" "replace-kube-proxy" "standalone" -}}
{{- if not (has .Values.mode $modes) -}}
{{- fail (printf "mode %q: must be one of %s" .Values.mode (join ", " $modes)) -}}
{{- end -}}
{{- if and (ne .Values.mode "standalone") (ne .Release.Namespace "kube-system") -}}
{{- fail (printf "mode %s runs with kube-proxy's ServiceAccount and ConfigMap in kube-system: install the release there (helm -n kube-system), not in %q" .Values.mode .Release.Namespace) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}

{{/*
Labels of every object: the kustomize base's, and Helm's own. The objects
that carry app.kubernetes.io/name in deploy/ (the DaemonSet, the monitoring
objects, which select each other by it) add it themselves.
*/}}
{{- define "ipvs-proxy.labels" -}}
app.kubernetes.io/part-of: ipvs-proxy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
The image, tag defaulting to the chart's appVersion.
*/}}
{{- define "ipvs-proxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The ServiceAccount the pods run as.
*/}}
{{- define "ipvs-proxy.serviceAccount" -}}
{{- if eq (include "ipvs-proxy.mode" .) "standalone" -}}
ipvs-proxy
{{- else -}}
{{- (include "ipvs-proxy.kubeProxyPreset" . | fromYaml).serviceAccount -}}
{{- end -}}
{{- end -}}
