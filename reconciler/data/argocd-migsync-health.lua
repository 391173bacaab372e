-- Argo CD health check of a migops MigSync (argocd-cm key resource.customizations.health.migops.io_MigSync).
-- From the conditions and summary the reconciler writes (docs/reconciler.md):
--   Stalled=True (a refused commit, a halted rollout, a node past its deadline) -> Degraded
--   a node reported Failed (status.summary.failed > 0)                          -> Degraded
--   Ready=True for the current generation                                       -> Healthy
--   anything else (no status yet, a rollout under way)                          -> Progressing
local hs = {status = "Progressing", message = "waiting for the reconciler"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Stalled" and c.status == "True" then
    return {status = "Degraded", message = (c.reason or "Stalled") .. ": " .. (c.message or "")}
  end
end
if obj.status.summary ~= nil and obj.status.summary.failed ~= nil and obj.status.summary.failed > 0 then
  return {status = "Degraded", message = tostring(obj.status.summary.failed) .. " node(s) failed to apply their MIG config"}
end
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then
    hs.message = c.message or ""
    if c.status == "True" and (c.observedGeneration == nil or c.observedGeneration == obj.metadata.generation) then
      hs.status = "Healthy"
    end
  end
end
return hs
