{{/*
kube-proxy's objects, by distribution (kubeProxy.distribution): the
ServiceAccount the kube-proxy modes run as, the ConfigMap mounted at
/var/lib/kube-proxy and the config file in it, read with
--config=/var/lib/kube-proxy/<configFile> as kube-proxy reads it.

The extension point for distributions: add a preset here, and a case to
test/e2e/chart when deploy/overlays gets the same preset.
*/}}
{{- define "ipvs-proxy.kubeProxyPresets" -}}
kubeadm:
  serviceAccount: kube-proxy
  configMap: kube-proxy
  configFile: config.conf
{{- end -}}

{{- define "ipvs-proxy.kubeProxyPreset" -}}
{{- $presets := include "ipvs-proxy.kubeProxyPresets" . | fromYaml -}}
{{- $name := .Values.kubeProxy.distribution -}}
{{- if not (hasKey $presets $name) -}}
{{- fail (printf "kubeProxy.distribution %q: must be one of %s" $name (join ", " (keys $presets | sortAlpha))) -}}
{{- end -}}
{{- get $presets $name | toYaml -}}
{{- end -}}
