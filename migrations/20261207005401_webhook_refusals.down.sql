DROP TABLE webhook_refusals;
