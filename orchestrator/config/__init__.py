"""What the user wrote, validated: YAML loading with line numbers (yamlfile), matrices
(matrix), their expansion into ordered cells (plan) and the device inventory (inventory).
Nothing here touches a device or the store."""
